"""Full finetuning of any causal LM on a dataset directory, with Hugging Face `Trainer`.

`Trainer` is used so that `accelerate launch` spreads the same code over GPUs and nodes. The
best epoch is chosen on validation top-k accuracy (see `weightgraft.data.build` for why that
validation does not leak facts); its weights are saved as safetensors with
`training_config.json` recording the options, the data and the validation history.

With `checkpoint_dir`, Trainer saves a checkpoint (safetensors weights, optimizer, scheduler, RNG)
after every epoch there, keeps only the latest and the best, and a rerun resumes from the latest:
a killed finetune loses at most one epoch. The best epoch is then tracked by Trainer itself
(`load_best_model_at_end`) rather than held in memory.
"""

from __future__ import annotations

import random
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PrinterCallback,
    TrainingArguments,
)
from transformers.utils import logging as hf_logging

from weightgraft.atomic import write_json
from weightgraft.data.data_errors import DataError
from weightgraft.data.io import load_eval_prompts, load_manifest, load_train_texts, read_user_articles
from weightgraft.folder_install import atomic_directory
from weightgraft.folder_ownership import check_whole, refuse_nonempty, remove_entry
from weightgraft.pretrained import as_local
from weightgraft.recorded import refuse_own_input, refuse_user_files
from weightgraft.remote_code import refuse_remote_code
from weightgraft.runtime import check_device, is_main_process, resolve_device
from weightgraft.training import ATTENTION_KERNELS, GENERAL_LOSSES, TRAINING_RECORD, AttentionKernel, GeneralLoss
from weightgraft.training.anchor import AnchorToStart
from weightgraft.training.batches import PadCollator, TextDataset, encode_texts
from weightgraft.training.checkpoints import SealCheckpoints, last_complete_checkpoint
from weightgraft.training.distill import frozen_copy
from weightgraft.training.lengths import check_lengths
from weightgraft.training.trainable import freeze_parts, with_lora
from weightgraft.training.trainer import AccuracyTrainer, EarlyStopping

Precision = Literal["fp32", "bf16", "fp16"]


@dataclass
class FinetuneConfig:
    lr: float = 1e-3
    epochs: int = 6
    batch_size: int = 16
    precision: Precision = "fp32"
    freeze_embeddings: bool = False
    freeze_unembeddings: bool = False
    freeze_final_norm: bool = False  # keep the norm before the unembedding fixed too
    freeze_layers: int = 0  # keep the first N decoder blocks fixed
    mix_ratio: float = 0.25  # share of general text among the training examples
    weight_decay: float = 0.0
    warmup_ratio: float = 0.05
    max_length: int = 256
    device: str = "auto"  # "auto", "cpu", "cuda", "cuda:1", ...
    seed: int = 0
    eval_k: int = 5
    max_validation_prompts: int | None = 400
    # Stop once validation has not improved for this many epochs (transformers'
    # EarlyStoppingCallback). The learning-rate schedule still spans `epochs`, so the epochs that
    # do run, and the best one kept, are those of the full run whenever the best comes before the stop.
    early_stopping_patience: int | None = None
    # Speed, not method: the loss is the same. `labelled_logits_only` runs the unembedding only at
    # positions that carry a label (padding skipped; on Gemma-3's 262k vocabulary the unembedding
    # is most of a step). `group_by_length` batches texts of similar length (transformers'
    # length-grouped sampler) so that little of a batch is padding.
    labelled_logits_only: bool = False
    group_by_length: bool = False
    # 0: every weight is trained (the paper's finetune). N > 0: a LoRA of rank N (peft, alpha 2N)
    # on every linear layer of the blocks is trained instead and merged into the saved model, a
    # lever against forgetting (`docs/real_models.md`); the saved model is a full model either way.
    lora_rank: int = 0
    # How the general text mixed in is learned. "tokens": cross-entropy on its tokens, as on the
    # facts. "kl": each of its positions teaches the pretrained model's whole next-token
    # distribution (KL from a frozen copy of the model; `training.distill`), a lever against
    # forgetting for general text the pretrained model wrote itself (self-replay).
    general_loss: GeneralLoss = "tokens"
    # Speed, not method: the attention kernel trained with (None: transformers' choice for the
    # model, sdpa where it has it). Eager computes the same attention; the saved model does not
    # keep the choice.
    attention: AttentionKernel | None = None
    # 0: off. A > 0: after each optimizer step every trained weight is pulled back towards its
    # pretrained value by lr * A of its change (`training.anchor`), a lever against forgetting.
    anchor: float = 0.0

    def record(self) -> dict:
        """The options as recorded (training_config.json, ledger inputs): options at the values
        they had before they existed (`lora_rank` 0, `general_loss` "tokens", `attention` None,
        `anchor` 0)
        are left out, so that records and input hashes made before then still match."""
        body = asdict(self)
        if not self.lora_rank:
            del body["lora_rank"]
        if self.general_loss == "tokens":
            del body["general_loss"]
        if self.attention is None:
            del body["attention"]
        if not self.anchor:
            del body["anchor"]
        return body


@dataclass
class FinetuneResult:
    path: Path
    best_epoch: int
    best_accuracy: float
    history: list[float] = field(default_factory=list)
    seconds: float = 0.0


@contextmanager
def _scratch_directory():
    with tempfile.TemporaryDirectory(prefix="weightgraft-rank-") as tmp:
        yield Path(tmp)


def _resolve_device(device: str) -> str:
    """`device` made concrete and present here, by the one check (`runtime.check_device`)."""
    try:
        return check_device(resolve_device(device), here=True)
    except ValueError as err:
        raise DataError(str(err)) from None


@contextmanager
def quiet_loading():
    """transformers without its load report and progress bar (restored after)."""
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with transformers_bars(False):
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


@contextmanager
def transformers_bars(shown: bool):
    """transformers' progress bars (the Trainer's, save_pretrained's) on as they were, or off
    while `shown` is False (restored after): what `progress=False` promises."""
    bars = hf_logging.is_progress_bar_enabled()
    if not shown:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bars and not shown:
            hf_logging.enable_progress_bar()


def _check_config(config: FinetuneConfig, general_texts: list[str] | None) -> str:
    """Refuse settings that cannot run, before any load; the device to train on."""
    if config.lora_rank < 0:
        raise DataError(f"lora_rank must be 0 (a full finetune) or a LoRA rank > 0, not {config.lora_rank}")
    if not 0.0 <= config.mix_ratio < 1.0:
        raise DataError("mix_ratio must be in [0, 1): the share of general text among training examples")
    if config.mix_ratio > 0 and not general_texts:
        raise DataError("mix_ratio > 0 needs general text (general_texts / --general-text); or set mix_ratio 0")
    if config.general_loss not in GENERAL_LOSSES:
        raise DataError(f"general_loss must be one of {', '.join(GENERAL_LOSSES)}, not {config.general_loss!r}")
    if config.attention is not None and config.attention not in ATTENTION_KERNELS:
        raise DataError(
            f"attention must be one of {', '.join(ATTENTION_KERNELS)} (or None: the model's default), "
            f"not {config.attention!r}"
        )
    if config.anchor < 0 or (config.anchor and config.lora_rank):
        raise DataError(
            f"anchor must be 0 (off) or > 0, and a full finetune's (lora_rank 0): not anchor {config.anchor} "
            f"with lora_rank {config.lora_rank}"
        )
    if config.general_loss == "kl" and not config.mix_ratio:
        raise DataError("general_loss 'kl' scores the general text mixed in: it needs mix_ratio > 0 and general text")
    if config.early_stopping_patience is not None and config.early_stopping_patience < 1:
        raise DataError(
            "early_stopping_patience must be at least 1 (epochs without improvement), or None to run every epoch"
        )
    device = _resolve_device(config.device)
    if config.precision == "fp16" and not device.startswith("cuda"):
        raise DataError("fp16 training needs a CUDA GPU; on CPU use --precision bf16 or fp32")
    return device


def _load_tokenizer(model: str | Path, trust_remote_code: bool):
    """The model's tokenizer, with the end-of-text token as padding where it has none."""
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        raise DataError(
            f"--model: no usable tokenizer in {model} ({str(err).splitlines()[0][:200]}); save the tokenizer "
            "beside the model with tokenizer.save_pretrained(DIR)"
        ) from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def _load_model(model: str | Path, trust_remote_code: bool, attention: str | None = None):
    """The model in float32 from safetensors, with `attention`'s kernel where one is named;
    refused when its checkpoint lacks tensors."""
    kernel = {"attn_implementation": attention} if attention else {}
    with quiet_loading():  # a refusal below must be the only line printed
        net, info = AutoModelForCausalLM.from_pretrained(
            model,
            trust_remote_code=trust_remote_code,
            dtype=torch.float32,
            use_safetensors=True,
            output_loading_info=True,
            **kernel,
        )
    missing = sorted(info.get("missing_keys") or [])
    if missing:  # they would be trained from random values and saved into the finetune
        raise DataError(
            f"--model: the checkpoint of {model} lacks {len(missing)} tensor(s) its config.json needs "
            f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); save the model again with "
            "save_pretrained, or fix config.json"
        )
    return net


@dataclass
class _TrainingData:
    """What one finetune reads: the dataset's texts with general text mixed in, and validation."""

    train_texts: list[str]
    n_general: int
    validation: list
    dataset: TextDataset


def _training_data(tokenizer, net, data_dir: Path, config: FinetuneConfig, general_texts) -> _TrainingData:
    """The training rows (general text drawn by the config's seed) and the validation prompts
    (at most `max_validation_prompts`, drawn by the seed), checked against the model's length."""
    train_texts = load_train_texts(data_dir)
    rng = random.Random(f"mix-{config.seed}")
    n_general = round(config.mix_ratio / (1 - config.mix_ratio) * len(train_texts)) if config.mix_ratio else 0
    mixed = train_texts + [rng.choice(general_texts) for _ in range(n_general)] if n_general else list(train_texts)
    validation = load_eval_prompts(data_dir, "validation")
    if config.max_validation_prompts is not None and len(validation) > config.max_validation_prompts:
        validation = random.Random(f"val-{config.seed}").sample(validation, config.max_validation_prompts)
    check_lengths(tokenizer, net.config, train_texts, validation, config.max_length, data_dir)
    flags = [False] * len(train_texts) + [True] * n_general if config.general_loss == "kl" else None
    dataset = TextDataset(encode_texts(tokenizer, mixed, config.max_length), flags)
    return _TrainingData(train_texts, n_general, validation, dataset)


def _training_arguments(
    config: FinetuneConfig, device: str, output_dir: Path, n_rows: int, checkpoints: bool, progress: bool
) -> TrainingArguments:
    """Trainer's arguments: evaluate every epoch; with `checkpoints`, save every epoch into
    `output_dir` and keep the latest and the best (which Trainer loads at the end)."""
    steps_per_epoch = -(-n_rows // config.batch_size)
    best_metric = {"greater_is_better": True, "metric_for_best_model": f"top{config.eval_k}_accuracy"}
    if checkpoints:
        saving = {"save_strategy": "epoch", "save_total_limit": 1, "load_best_model_at_end": True, **best_metric}
    else:
        saving = {"save_strategy": "no"}
        if config.early_stopping_patience:  # the callback reads the metric; the best is kept in memory
            saving |= best_metric
    return TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=config.batch_size,
        num_train_epochs=config.epochs,
        learning_rate=config.lr,
        weight_decay=config.weight_decay,
        warmup_steps=int(config.warmup_ratio * steps_per_epoch * config.epochs),
        lr_scheduler_type="linear",
        bf16=config.precision == "bf16",
        fp16=config.precision == "fp16",
        use_cpu=device == "cpu",
        eval_strategy="epoch",
        **saving,
        logging_steps=max(1, steps_per_epoch // 2),
        report_to="none",
        disable_tqdm=not progress,
        seed=config.seed,
        data_seed=config.seed,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        train_sampling_strategy="group_by_length" if config.group_by_length else "random",
    )


def _train(trainer: AccuracyTrainer, net, device: str, resume_from: str | None, checkpoints: bool) -> None:
    """Train, then leave the best epoch's weights in `net` and the whole history in `trainer`."""
    if device.startswith("cuda") and device != "cuda":
        torch.cuda.set_device(torch.device(device))
    trainer.train(resume_from_checkpoint=resume_from)
    if not checkpoints:
        net.load_state_dict(trainer.best_state)
    else:  # Trainer has loaded the best checkpoint; the history spans every session
        key = f"eval_top{trainer.k}_accuracy"
        trainer.history = [e[key] for e in trainer.state.log_history if key in e]
        trainer.best_epoch = trainer.history.index(max(trainer.history)) + 1


def _trainer(
    net, tokenizer, args, data: _TrainingData, config: FinetuneConfig, checkpoints: bool, base=None
) -> AccuracyTrainer:
    """The Trainer; without progress it prints nothing (Trainer swaps its progress bars for a
    printer of every loss and evaluation dict; the history stays in `state.log_history`)."""
    trainer = AccuracyTrainer(
        model=net,
        args=args,
        train_dataset=data.dataset,
        eval_dataset=data.dataset,
        data_collator=PadCollator(tokenizer.pad_token_id),
        validation=data.validation,
        eval_tokenizer=tokenizer,
        k=config.eval_k,
        keep_best=not checkpoints,
        labelled_logits_only=config.labelled_logits_only,
        base=base,
        callbacks=[
            *([SealCheckpoints()] if checkpoints else []),
            *([AnchorToStart(net, config.anchor, base)] if config.anchor else []),
            *([EarlyStopping(config.early_stopping_patience)] if config.early_stopping_patience else []),
        ]
        or None,
    )
    if args.disable_tqdm:
        trainer.remove_callback(PrinterCallback)
    return trainer


def _run_record(
    device: str, data: _TrainingData, trainer: AccuracyTrainer, resume_from: str | None, seconds: float
) -> dict:
    """What one finetune measured, for its training record."""
    return {
        "device_used": device,
        "n_train_texts": len(data.train_texts),
        "n_general_texts": data.n_general,
        "n_validation_prompts": len(data.validation),
        "validation_top_k_by_epoch": trainer.history,
        "best_epoch": trainer.best_epoch,
        "resumed_from": Path(resume_from).name if resume_from else None,
        "seconds": round(seconds, 1),
    }


def _training_record(model, data_dir: Path, manifest: dict, config: FinetuneConfig, run: dict) -> dict:
    """`training_config.json`: the options, the data, and what the run measured (`run`)."""
    return {
        "kind": "finetune",
        "base_model": str(model),
        "data_dir": str(data_dir),
        "data_sha256": manifest.get("sha256"),
        "data_seed": manifest.get("seed"),
        **config.record(),
        **run,
    }


def read_general_text(path: str | Path) -> list[str]:
    """General text to mix into training: a dataset folder's train.jsonl, or a JSONL of
    {"text": ...} lines (`--general-text`)."""
    path = Path(path)
    return load_train_texts(path) if path.is_dir() else read_user_articles(path)


def finetune_from_files(
    model: str | Path,
    data_dir: str | Path,
    out_dir: str | Path,
    config: FinetuneConfig = FinetuneConfig(),
    general_text: str | Path | None = None,
    trust_remote_code: bool = False,
    overwrite: bool = False,
) -> FinetuneResult:
    """`weightgraft train`'s work: `finetune`, with its general text read from `general_text`
    (see `read_general_text`); a non-empty `out_dir` is refused (unless `overwrite`) before
    anything is read, and so is an `out_dir` that is (or holds, or lies in) one of its inputs."""
    refuse_own_input(out_dir, {"--model": model, "--data": data_dir, "--general-text": general_text})
    refuse_nonempty(out_dir, overwrite, command="train")
    general = read_general_text(general_text) if general_text is not None else None
    return finetune(
        model,
        data_dir,
        out_dir,
        config,
        general_texts=general,
        trust_remote_code=trust_remote_code,
        overwrite=overwrite,
    )


def finetune(
    model: str | Path,
    data_dir: str | Path,
    out_dir: str | Path,
    config: FinetuneConfig = FinetuneConfig(),
    general_texts: list[str] | None = None,
    progress: bool = True,
    trust_remote_code: bool = False,
    overwrite: bool = False,
    checkpoint_dir: str | Path | None = None,
) -> FinetuneResult:
    """Finetune `model` (hub id, local directory, real model name or `.gguf` file) on `data_dir`'s train.jsonl; save to `out_dir`.

    An existing non-empty `out_dir` is refused before any work unless `overwrite`, which then
    replaces only weightgraft's own files there (a user's other files are kept).
    `checkpoint_dir`: save every epoch there and resume from its latest checkpoint (the caller
    makes sure that a checkpoint found there belongs to this model, data and config)."""
    start = time.time()
    refuse_own_input(out_dir, {"model": model, "data_dir": data_dir})
    refuse_nonempty(out_dir, overwrite, command="train")
    refuse_user_files(out_dir)
    refuse_remote_code(model, trust_remote_code, "--model", "pass --trust-remote-code (Python: trust_remote_code=True)")
    device = _check_config(config, general_texts)
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    manifest = load_manifest(data_dir)
    local = as_local(model)  # a real model's name or a .gguf file: its converted folder
    if Path(local).is_dir():
        check_whole(local)  # a model folder whose replacement was cut off mixes two builds
    tokenizer = _load_tokenizer(local, trust_remote_code)
    net = _load_model(local, trust_remote_code, config.attention)
    base = frozen_copy(net) if config.general_loss == "kl" else None  # before any part is frozen or adapted
    freeze_parts(net, config)
    lora = with_lora(net, config.lora_rank)
    data = _training_data(tokenizer, net, data_dir, config, general_texts)
    checkpoints = checkpoint_dir is not None
    # Under `accelerate launch` / torchrun every process trains; only rank 0 writes `out_dir`.
    is_main = is_main_process()
    folder = atomic_directory(out_dir, overwrite, command="train") if is_main else _scratch_directory()
    with folder as tmp, transformers_bars(progress):
        resume_from = last_complete_checkpoint(Path(checkpoint_dir)) if checkpoints else None
        output_dir = Path(checkpoint_dir) if checkpoints else tmp / "trainer"
        args = _training_arguments(config, device, output_dir, len(data.dataset), checkpoints, progress)
        if base is not None:
            base.to(args.device)
        trainer = _trainer(net, tokenizer, args, data, config, checkpoints, base)
        _train(trainer, net, device, resume_from, checkpoints)
        if lora is not None:  # the adapters' deltas into the weights: a plain model is saved
            net = lora.merge_and_unload()
        if is_main:
            net.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            run = _run_record(device, data, trainer, resume_from, time.time() - start)
            write_json(tmp / TRAINING_RECORD, _training_record(model, data_dir, manifest, config, run))
        remove_entry(tmp, "trainer")
    return FinetuneResult(out_dir, trainer.best_epoch, max(trainer.history), trainer.history, time.time() - start)
