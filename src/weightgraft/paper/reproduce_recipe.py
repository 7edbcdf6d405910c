"""The reproduce job's recipe: the options and the chosen setting resolved once into one frozen,
typed value that every later step reads (the plan, the finetunes, the runs, the report).

`ReproduceOptions` holds what the user asked, `None` meaning "the setting's"; `resolve_recipe`
fills each of those from the setting, then from the paper, in this one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from weightgraft.paper.estimate import DEFAULT_MAX_LENGTH, PAPER_MODELS, paper_model_name
from weightgraft.runtime import resolve_device
from weightgraft.training import AttentionKernel, GeneralLoss

SettingName = Literal["aggressive", "gentle", "laptop"]
RunDtype = Literal["float32", "bfloat16", "float16"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]

# The paper's finetuning (conditions.md): 10 epochs, batch 4, 1000 facts per dataset.
PAPER_EPOCHS = 10
PAPER_BATCH = 4
PAPER_FACTS = 1000
# Self-replay (--replay): the share of the training texts that are the pretrained model's own
# continuations of neutral prompts, where the setting mixes in no general text of its own (where it
# does, the replay texts join its general text at the setting's share). Not the paper's.
REPLAY_SHARE = 0.25


@dataclass(frozen=True)
class Setting:
    """One named finetuning setting; fields left at their defaults are the paper's."""

    lr: float
    weight_decay: float
    mix_ratio: float  # share of general text mixed into finetuning
    facts: int = PAPER_FACTS
    epochs: int = PAPER_EPOCHS
    batch_size: int = PAPER_BATCH
    group_by_length: bool = False  # batches of texts of similar length (the paper: random batches)
    layer_sweeps: bool = True  # weightgraft's own analysis, not the paper's
    lora_rank: int = 0  # 0: every weight trained (the paper's); N: a merged LoRA of rank N
    anchor: float = 0.0  # 0: off (the paper's); A: weights pulled towards PRE (`training.anchor`)


# "aggressive" is the paper's main setting; "gentle" is its less aggressive variant with general
# text mixed in (the share of general text is our choice). "laptop" is weightgraft's own: the
# aggressive setting scaled to a laptop's two CPU cores (not the paper's; every difference is named
# in the report). Fewer facts and epochs, and a batch of 16, which runs twice the tokens per second
# of the paper's 4 on a CPU; the learning rate was raised until the relation model learned the
# facts (docs/real_models.md). Its batches group texts of similar length, so that little of a step
# is padding. The layer sweeps (44k of a 56k-row job) are left out unless asked for.
SETTINGS: dict[str, Setting] = {
    "aggressive": Setting(lr=2e-5, weight_decay=0.01, mix_ratio=0.0),
    "gentle": Setting(lr=2e-6, weight_decay=0.0, mix_ratio=0.5),
    "laptop": Setting(
        lr=3e-4,
        weight_decay=0.01,
        mix_ratio=0.0,
        facts=40,
        epochs=3,
        batch_size=16,
        group_by_length=True,
        layer_sweeps=False,
    ),
}
PAPER_SETTING = SETTINGS["aggressive"]


@dataclass(frozen=True)
class ReproduceOptions:
    """What the user asked for; `None` is "the setting's" (see `resolve_recipe`).

    Args:
        model: the pretrained model (a real model by name, a .gguf file, a folder, a cached hub id).
        out: the job folder; an existing one is resumed.
        device: auto, cpu, cuda, cuda:N or mps.
        dtype: dtype of the preset runs.
        precision: finetuning precision; auto is fp16 on a GPU (the paper's), on a CPU bf16 where
            a step of the model is measured faster in it (`paper.cpu_precision`), else fp32.
        attention: the attention kernel finetunes train with: sdpa, eager, or auto (on a CPU
            eager where a step of the model is measured faster with it, `paper.cpu_attention`;
            elsewhere the model's default). The same attention either way: speed, not method.
        facts, epochs, batch_size, lr, layer_sweeps: overrides of the setting's values.
        setting: aggressive, gentle or laptop (`SETTINGS`).
        datasets: the paper's dataset codes; the first gets every analysis.
        general_text: general text mixed in by the gentle setting.
        replay: mix the pretrained model's own continuations of neutral prompts into every
            finetune (self-replay, `paper.replay`; not the paper's).
        general_loss: how the general text is learned: "tokens" (cross-entropy, as the paper's
            gentle setting) or "kl" (the pretrained model's whole next-token distribution,
            `training.distill`; not the paper's).
        lora_rank: train a LoRA of this rank on every block linear instead of every weight,
            merged into the saved model (not the paper's; None: the setting's).
        anchor: after each optimizer step pull every trained weight back towards PRE's by
            lr * anchor of its change (`training.anchor`; not the paper's; None: the setting's).
        max_examples: cap on the prompts scored per experiment (None: all).
        bootstrap: resamples for the intervals.
        seed: the seed of data, finetunes and runs.
    """

    model: str
    out: Path
    device: str = "auto"
    dtype: RunDtype = "float32"
    precision: Precision = "auto"
    facts: int | None = None
    epochs: int | None = None
    lr: float | None = None
    setting: SettingName = "aggressive"
    datasets: tuple[str, ...] = ("FMRA",)
    general_text: Path | None = None
    max_examples: int | None = None
    bootstrap: int = 1000
    seed: int = 0
    batch_size: int | None = None
    layer_sweeps: bool | None = None
    replay: bool = False
    lora_rank: int | None = None
    general_loss: GeneralLoss = "tokens"
    attention: Literal["auto", "sdpa", "eager"] = "auto"
    anchor: float | None = None


@dataclass(frozen=True)
class Recipe:
    """Every choice of one reproduce job, resolved: nothing downstream fills a default again."""

    model: str
    out: Path  # absolute: the folder is the job's identity, whatever spelling named it
    device: str  # resolved (cpu, cuda:0, ...)
    dtype: RunDtype
    precision: Literal["fp32", "bf16", "fp16"]
    setting: SettingName
    facts: int
    epochs: int
    batch_size: int
    lr: float
    weight_decay: float
    mix_ratio: float
    group_by_length: bool
    layer_sweeps: bool
    max_length: int
    datasets: tuple[str, ...]
    general_text: Path | None
    max_examples: int | None
    bootstrap: int
    seed: int
    replay: bool = False  # self-replay texts join the general text (mix_ratio: their share)
    lora_rank: int = 0  # 0: a full finetune
    general_loss: GeneralLoss = "tokens"  # "kl": general text teaches PRE's distribution
    attention: AttentionKernel | None = None  # None: the model's default kernel (sdpa mostly)
    anchor: float = 0.0  # 0: off; A: trained weights pulled towards PRE's (`training.anchor`)

    def record(self) -> dict:
        """The recipe as JSON values, for the job's provenance (options at the values they had
        before they existed are left out, as jobs made before then recorded them)."""
        body = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        if not self.lora_rank:
            del body["lora_rank"]
        if self.general_loss == "tokens":
            del body["general_loss"]
        if self.attention is None:
            del body["attention"]
        if not self.anchor:
            del body["anchor"]
        return body


def _given(value, default):
    return default if value is None else value


def resolve_recipe(options: ReproduceOptions, setting: Setting) -> Recipe:
    """The options with every open choice filled from `setting`, the device resolved, and the
    finetuning precision chosen (auto: fp16 on a GPU as in the paper, fp32 elsewhere; on a CPU
    `plan_job` then times bf16 against it, `paper.cpu_precision`)."""
    device = resolve_device(options.device)
    precision = options.precision
    if precision == "auto":
        precision = "fp16" if device.startswith("cuda") else "fp32"
    name = paper_model_name(options.model)
    return Recipe(
        model=options.model,
        out=Path(options.out).expanduser().resolve(),
        device=device,
        dtype=options.dtype,
        precision=precision,
        setting=options.setting,
        facts=_given(options.facts, setting.facts),
        epochs=_given(options.epochs, setting.epochs),
        batch_size=_given(options.batch_size, setting.batch_size),
        lr=_given(options.lr, setting.lr),
        weight_decay=setting.weight_decay,
        mix_ratio=setting.mix_ratio or (REPLAY_SHARE if options.replay else 0.0),
        group_by_length=setting.group_by_length,
        layer_sweeps=_given(options.layer_sweeps, setting.layer_sweeps),
        max_length=PAPER_MODELS[name][2] if name else DEFAULT_MAX_LENGTH,
        datasets=tuple(options.datasets),
        general_text=options.general_text,
        max_examples=options.max_examples,
        bootstrap=options.bootstrap,
        seed=options.seed,
        replay=options.replay,
        lora_rank=_given(options.lora_rank, setting.lora_rank),
        general_loss=options.general_loss,
        attention=None if options.attention == "auto" else options.attention,
        anchor=_given(options.anchor, setting.anchor),
    )
