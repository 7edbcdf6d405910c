"""The reproduce job: which data sets, finetunes and preset runs the paper's pipeline on one model
needs, planned from the options alone (nothing is built), and each run group's config.

`weightgraft.pipelines.reproduce` runs a planned `Job` step by step (resumable); `reproduce_plan`
prints it with its estimated cost; `reproduce_report` writes its paper-vs-this-run report.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from transformers import AutoTokenizer

from weightgraft.data.facts import max_fake_fake_facts
from weightgraft.data.names import NamePool
from weightgraft.data.real_entities import REAL_FILMS
from weightgraft.errors import UserError
from weightgraft.experiments.models import model_dir
from weightgraft.paper.cpu_attention import choose_cpu_attention
from weightgraft.paper.cpu_precision import choose_cpu_precision
from weightgraft.paper.presets import PRESET_NAMES
from weightgraft.paper.reproduce_recipe import SETTINGS, Recipe, ReproduceOptions, resolve_recipe
from weightgraft.remote_code import refuse_remote_code
from weightgraft.runtime import rank as launch_rank
from weightgraft.runtime import resolve_device
from weightgraft.runtime import world_size as launch_world_size
from weightgraft.training import GENERAL_LOSSES
from weightgraft.training.precision import CPU_NO_BF16_NOTE, cpu_bf16_units

# The paper's dataset codes and weightgraft's fact kinds.
DATASET_KINDS = {"FMRA": "fake_real", "FMFA": "fake_fake", "RMRA-shuffled": "real_shuffled"}
DATASET_HELP = (
    "FMRA = fake movies, real actors (fact kind fake_real; the paper's main set); "
    "FMFA = fake movies, fake actors (fake_fake); RMRA-shuffled = real movies with "
    "shuffled real casts (real_shuffled)"
)
TEXTS_PER_DIRECTION = 11  # the paper's sentences per fact and direction
# Presets per group of runs. The first dataset gets every analysis; the others the position
# analysis, the only one the paper published for them.
MAIN_PRESETS = (
    "position_grafting",
    "position_relation",
    "position_title",
    "components_reversal",
    "components_pre",
    "known_facts",
    "layer_sweeps",
)
SWEEPS = "layer_sweeps"  # weightgraft's own analysis: optional where the setting says so
HYBRID_PRESETS = ("hybrid",)
# Self-replay (--replay): continuations of this many tokens, this many per neutral prompt (~300
# texts of ~40 tokens: about as long as a fact's sentences), sampled at temperature 1.
REPLAY_TOKENS = 32
REPLAY_SAMPLES = 3
OTHER_PRESETS = ("position_grafting",)


@dataclass
class DataSet:
    directory: Path
    kind: str
    n_facts: int
    order: str = "both"
    texts_per_fact: int = 2 * TEXTS_PER_DIRECTION
    purpose: str = ""


@dataclass
class FinetuneJob:
    name: str
    dataset: str
    out: Path
    checkpoints: Path
    purpose: str


@dataclass
class RunGroup:
    name: str
    out: Path
    models: dict[str, str]  # run-config key -> "pre" or a finetune name
    datasets: dict[str, str]  # run-config key -> data set key
    presets: list[str]
    missing: list[str] = field(default_factory=list)  # wanted presets this version lacks


@dataclass
class Job:
    recipe: Recipe
    sets: dict[str, DataSet]
    finetunes: dict[str, FinetuneJob]
    runs: dict[str, RunGroup]
    notes: list[str]


class ReproduceError(UserError, ValueError):
    """A reproduce job that cannot be planned as asked (an option out of range, an unknown
    dataset code, a model that is not a model folder); the message names the option to change."""


def finetune_config(recipe: Recipe):
    """The recipe's finetuning settings as the trainer's config."""
    # here, not at the top: training.finetune brings transformers' Trainer, measured at 2.4 s
    # more for `weightgraft reproduce`'s start (its --dry-run plan) on a loaded 2-core machine
    from weightgraft.training.finetune import FinetuneConfig

    return FinetuneConfig(
        lr=recipe.lr,
        epochs=recipe.epochs,
        batch_size=recipe.batch_size,
        precision=recipe.precision,
        mix_ratio=recipe.mix_ratio,
        weight_decay=recipe.weight_decay,
        warmup_ratio=0.0,
        max_length=recipe.max_length,
        device=recipe.device,
        seed=recipe.seed,
        labelled_logits_only=True,  # the same loss, without the padding's unembedding
        group_by_length=recipe.group_by_length,
        lora_rank=recipe.lora_rank,
        general_loss=recipe.general_loss,
        attention=recipe.attention,
        anchor=recipe.anchor,
    )


def replay_spec(recipe: Recipe):
    """How the job's self-replay texts are made (`paper.replay`), seeded by the job's seed."""
    # here, not at the top: as finetune_config's import, kept off `weightgraft reproduce`'s start
    from weightgraft.paper.replay import ReplaySpec

    return ReplaySpec(new_tokens=REPLAY_TOKENS, samples=REPLAY_SAMPLES, temperature=1.0, seed=recipe.seed)


def _precision_note(recipe: Recipe) -> str | None:
    """A one-line note where --precision bf16 finetunes on a CPU without bf16 units (emulated)."""
    on_cpu = not recipe.device.startswith("cuda")
    return CPU_NO_BF16_NOTE if recipe.precision == "bf16" and on_cpu and not cpu_bf16_units() else None


def _known_count() -> int:
    return len(REAL_FILMS)


def _check_tokenizer(model: str) -> None:
    """A local model folder must hold its tokenizer: every step after the plan needs it."""
    folder = model_dir(str(model))
    if folder is None:
        return  # a hub id not cached: the finetune step says whether it can be had

    try:
        AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise UserError(
            f"--model: no usable tokenizer in {folder} ({str(err).splitlines()[0][:200]}); save the "
            "tokenizer beside the model with tokenizer.save_pretrained(DIR)"
        ) from None


def _fake_fake_limit(seed: int) -> int:
    return max_fake_fake_facts(NamePool(seed))


def check_options(options: ReproduceOptions) -> None:
    """Refuse options no job can be planned from, each with the fix named (ValueError)."""
    if not options.datasets:
        raise ReproduceError(f"--datasets names no dataset; choose from {', '.join(DATASET_KINDS)}")
    bad = [c for c in options.datasets if c not in DATASET_KINDS]
    if bad:
        raise ReproduceError(f"unknown dataset code(s) {bad}; choose from {', '.join(DATASET_KINDS)} ({DATASET_HELP})")
    if options.setting not in SETTINGS:
        raise ReproduceError(f"unknown --setting {options.setting!r}; use {', '.join(SETTINGS)}")
    refuse_remote_code(
        options.model,
        False,
        "--model",
        "reproduce never does; finetune it with `weightgraft train --trust-remote-code` and run "
        "configs with `trust_remote_code: true` instead",
    )
    _check_tokenizer(options.model)
    if options.facts is not None and options.facts < 4:
        raise ReproduceError("--facts must be at least 4 (the hybrid splits the facts in two halves)")
    if options.setting == "gentle" and options.general_text is None:
        raise ReproduceError(
            "--setting gentle mixes general text into finetuning: give "
            '--general-text (a JSONL of {"text": ...}, e.g. OpenWebText or IMDB '
            "samples, or a dataset directory)"
        )
    if options.general_loss not in GENERAL_LOSSES:
        raise ReproduceError(f"unknown --general-loss {options.general_loss!r}; use {' or '.join(GENERAL_LOSSES)}")
    if options.general_loss == "kl" and not (options.replay or options.general_text):
        raise ReproduceError(
            "--general-loss kl scores general text, and this job mixes in none: add --replay "
            "(or --general-text FILE), or leave --general-loss at tokens"
        )
    if options.precision == "fp16" and not resolve_device(options.device).startswith("cuda"):
        raise ReproduceError(
            "--precision fp16 needs a CUDA GPU; on CPU use --precision fp32 or bf16 (or leave it at auto)"
        )


def _facts_of(code: str, recipe: Recipe, notes: list[str]) -> int:
    """The facts data set `code` can have: the options' number, capped where weightgraft's lists
    are shorter (with a note), refused where a cap would change the paper's set."""
    kind = DATASET_KINDS[code]
    n = recipe.facts
    if kind == "real_shuffled" and n > _known_count():
        n = _known_count()
        notes.append(
            f"{code}: {n} facts, not {recipe.facts}: weightgraft's list holds {n} real films to shuffle casts over"
        )
    if kind == "fake_fake" and n > _fake_fake_limit(recipe.seed):
        raise ReproduceError(
            f"--facts {n}: {code} needs two fake actors with first names of their own per fact, and our "
            f"name lists give at most {_fake_fake_limit(recipe.seed)} such facts; ask for at most that"
        )
    return n


def _add_finetune(job: Job, name: str, dataset: str, purpose: str) -> None:
    out = Path(job.recipe.out)
    job.finetunes[name] = FinetuneJob(name, dataset, out / "models" / name, out / "checkpoints" / name, purpose)


def _add_run(job: Job, name: str, models: dict[str, str], datasets: dict[str, str], wanted) -> None:
    """A run group of the `wanted` presets that this version has (the others listed as missing)."""
    chosen = [p for p in wanted if p in PRESET_NAMES]
    missing = [p for p in wanted if p not in PRESET_NAMES]
    job.runs[name] = RunGroup(name, Path(job.recipe.out) / "runs" / name, models, datasets, chosen, missing)


def _add_main(job: Job, code: str, n: int) -> None:
    """The first data set's extra sets, finetunes and runs: the one-direction (B2A) model, the
    task and relation models of the hybrid on its two halves, every analysis."""
    kind, data = DATASET_KINDS[code], Path(job.recipe.out) / "data"
    job.sets[f"{code}_b2a"] = DataSet(data / f"{code}_b2a", kind, n, "b2a", TEXTS_PER_DIRECTION, "one direction (B2A)")
    job.sets[f"{code}_half_a"] = DataSet(data / f"{code}_half_a", kind, n // 2, purpose="half A (task model)")
    job.sets[f"{code}_half_b"] = DataSet(
        data / f"{code}_half_b", kind, n - n // 2, purpose="half B (relation model, hybrid evaluation)"
    )
    _add_finetune(job, f"{code}_b2a", f"{code}_b2a", "one direction (B2A), all facts")
    _add_finetune(job, f"{code}_task", f"{code}_half_a", "task model: half A, both directions")
    _add_finetune(job, f"{code}_relation", f"{code}_half_b", "relation model: half B, both directions")
    models = {"pre": "pre", "sft": f"{code}_sft", "b2a": f"{code}_b2a"}
    presets = [p for p in MAIN_PRESETS if p != SWEEPS or job.recipe.layer_sweeps]
    if not job.recipe.layer_sweeps:
        job.notes.append(
            f"{code}: no layer sweeps (weightgraft's own analysis, not the paper's; the {job.recipe.setting} "
            "setting leaves them out): --layer-sweeps adds them"
        )
    _add_run(job, code, models, {"relation": code, "known": "known"}, presets)
    models = {"pre": "pre", "task": f"{code}_task", "sft": f"{code}_relation"}
    _add_run(job, f"{code}_hybrid", models, {"relation": f"{code}_half_b"}, HYBRID_PRESETS)


def plan_job(options: ReproduceOptions) -> Job:
    """The sets, finetunes and runs the options ask for (nothing is built), with the options
    resolved once into the job's `Recipe`."""
    check_options(options)
    recipe = resolve_recipe(options, SETTINGS[options.setting])
    job = Job(recipe, {}, {}, {}, [])
    if options.precision == "auto" and recipe.device == "cpu":
        choice = choose_cpu_precision(recipe.out, model_dir(str(recipe.model)), recipe.batch_size)
        job.recipe = recipe = replace(recipe, precision=choice.precision)
        job.notes.append(choice.reason)
    if options.attention == "auto" and recipe.device == "cpu":
        kernel = choose_cpu_attention(recipe.out, model_dir(str(recipe.model)), recipe.batch_size, recipe.precision)
        job.recipe = recipe = replace(recipe, attention=kernel.kernel)
        job.notes.append(kernel.reason)
    note = _precision_note(recipe)
    if note:
        job.notes.append(note)
    data = recipe.out / "data"
    n_known = min(recipe.facts, _known_count())
    job.sets["known"] = DataSet(
        data / "known", "real_real", n_known, purpose="real films with their real leads (known_facts)"
    )
    for index, code in enumerate(recipe.datasets):
        n = _facts_of(code, recipe, job.notes)
        job.sets[code] = DataSet(data / code, DATASET_KINDS[code], n, purpose="both directions")
        _add_finetune(job, f"{code}_sft", code, "SFT: both directions, all facts")
        if index == 0:
            _add_main(job, code, n)
        else:
            _add_run(job, code, {"pre": "pre", "sft": f"{code}_sft"}, {"relation": code}, OTHER_PRESETS)
    for group in job.runs.values():
        if group.missing:
            job.notes.append(
                f"run {group.name}: preset(s) {', '.join(group.missing)} are not in this weightgraft version; skipped"
            )
    job.runs = {k: g for k, g in job.runs.items() if g.presets}
    return job


def run_config(job: Job, group: RunGroup, model_paths: dict[str, str]) -> dict:
    """The run config (as a dict) of one group, with models and datasets as paths."""
    return {
        "name": f"reproduce-{group.name}",
        "seed": job.recipe.seed,
        "device": job.recipe.device,
        "dtype": job.recipe.dtype,
        "models": {key: model_paths[source] for key, source in group.models.items()},
        "datasets": {key: str(job.sets[s].directory) for key, s in group.datasets.items()},
        "experiments": [{"preset": p, "max_examples": job.recipe.max_examples} for p in group.presets],
        "bootstrap": job.recipe.bootstrap,
    }


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the number of processes (torchrun / accelerate launch set them)."""
    return launch_rank(), launch_world_size()
