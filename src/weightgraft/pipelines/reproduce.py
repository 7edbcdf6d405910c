"""`weightgraft reproduce`: the paper's whole pipeline on one model, as one resumable job.

datasets -> finetunes (both directions; one direction, B2A; task on half A; relation on half B)
-> every paper preset -> one report with "paper vs this run" tables.

Every step is recorded in `DIR/provenance.json` with the sha256 of its inputs (data manifests,
model fingerprints, the step's config); a step whose record matches is never redone (see
`weightgraft.ledger`). A finetune saves a Trainer checkpoint every epoch under `DIR/checkpoints/`, and a
killed one resumes from the latest. Under `torchrun` / `accelerate launch` every process takes
part in the finetunes (Trainer spreads them); rank 0 alone builds the data, runs the presets and
writes the report, and the other ranks stop after the last finetune.

Layout of DIR:
  provenance.json           steps with their input hashes, outputs, times; one entry per invocation
  data/<set>/               dataset directories (manifest.json hashes every file)
  models/<finetune>/        finetuned models (safetensors + training_config.json)
  checkpoints/<finetune>/   Trainer checkpoints while a finetune runs (removed when it is done)
  runs/<group>/             one run folder per group of presets (summary.csv, report.md)
  report.md                 the paper-vs-this-run report
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from weightgraft._version import __version__
from weightgraft.atomic import OutputExistsError, is_nonempty_folder, refuse_foreign, remove_entry
from weightgraft.errors import UserError
from weightgraft.ledger import Ledger, sha256_of, sha256_of_file
from weightgraft.locking import folder_lock, lock_file
from weightgraft.remote_code import refuse_remote_code
from weightgraft.runtime import rank as launch_rank
from weightgraft.runtime import resolve_device
from weightgraft.runtime import world_size as launch_world_size

# The paper's dataset codes and weightgraft's fact kinds.
DATASET_KINDS = {"FMRA": "fake_real", "FMFA": "fake_fake", "RMRA-shuffled": "real_shuffled"}
DATASET_HELP = (
    "FMRA = fake movies, real actors (fact kind fake_real; the paper's main set); "
    "FMFA = fake movies, fake actors (fake_fake); RMRA-shuffled = real movies with "
    "shuffled real casts (real_shuffled)"
)
# The paper's finetuning (conditions.md): "aggressive" is the main setting; "gentle" is its less
# aggressive variant with general text mixed in (the share of general text is our choice).
SETTINGS = {
    "aggressive": {"lr": 2e-5, "weight_decay": 0.01, "mix_ratio": 0.0},
    "gentle": {"lr": 2e-6, "weight_decay": 0.0, "mix_ratio": 0.5},
}
PAPER_EPOCHS = 10
PAPER_BATCH = 4
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
HYBRID_PRESETS = ("hybrid",)
OTHER_PRESETS = ("position_grafting",)


@dataclass
class ReproduceOptions:
    model: str
    out: Path
    device: str = "auto"
    dtype: str = "float32"  # of the preset runs
    precision: str = "auto"  # of the finetunes: fp16 on a GPU (the paper's), else fp32
    facts: int = 1000
    epochs: int | None = None
    lr: float | None = None
    setting: str = "aggressive"
    datasets: tuple[str, ...] = ("FMRA",)
    general_text: Path | None = None
    max_examples: int | None = None  # per preset experiment; None scores every prompt
    bootstrap: int = 1000
    seed: int = 0
    batch_size: int = PAPER_BATCH


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
    options: ReproduceOptions
    sets: dict[str, DataSet]
    finetunes: dict[str, FinetuneJob]
    runs: dict[str, RunGroup]
    notes: list[str]


class ReproduceError(UserError, ValueError):
    """A reproduce job that cannot be planned as asked (an option out of range, an unknown
    dataset code, a model that is not a model folder); the message names the option to change."""


@dataclass
class ReproduceResult:
    out: Path
    computed: list[str]
    reused: list[str]
    seconds: float
    report: Path | None


def finetune_config(options: ReproduceOptions, device: str, max_length: int):
    """The paper's finetuning settings, with the options' overrides."""
    from weightgraft.training.finetune import FinetuneConfig

    if options.setting not in SETTINGS:
        raise ReproduceError(f"unknown --setting {options.setting!r}; use aggressive or gentle")
    setting = SETTINGS[options.setting]
    precision = options.precision
    if precision == "auto":
        precision = "fp16" if device.startswith("cuda") else "fp32"
    return FinetuneConfig(
        lr=options.lr if options.lr is not None else setting["lr"],
        epochs=options.epochs if options.epochs is not None else PAPER_EPOCHS,
        batch_size=options.batch_size,
        precision=precision,
        mix_ratio=setting["mix_ratio"],
        weight_decay=setting["weight_decay"],
        warmup_ratio=0.0,
        max_length=max_length,
        device=device,
        seed=options.seed,
    )


def _known_count() -> int:
    from weightgraft.data.real_entities import REAL_FILMS

    return len(REAL_FILMS)


def _check_tokenizer(model: str) -> None:
    """A local model folder must hold its tokenizer: every step after the plan needs it."""
    from weightgraft.experiments.models import model_dir

    folder = model_dir(str(model))
    if folder is None:
        return  # a hub id not cached: the finetune step says whether it can be had
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError) as err:
        raise UserError(
            f"--model: no usable tokenizer in {folder} ({str(err).splitlines()[0][:200]}); save the "
            "tokenizer beside the model with tokenizer.save_pretrained(DIR)"
        ) from None


def _fake_fake_limit(seed: int) -> int:
    from weightgraft.data.facts import max_fake_fake_facts
    from weightgraft.data.names import NamePool

    return max_fake_fake_facts(NamePool(seed))


def plan_job(options: ReproduceOptions) -> Job:
    """The sets, finetunes and runs the options ask for (nothing is built)."""
    from weightgraft.experiments.presets import PRESETS

    if not options.datasets:
        raise ReproduceError(f"--datasets names no dataset; choose from {', '.join(DATASET_KINDS)}")
    bad = [c for c in options.datasets if c not in DATASET_KINDS]
    if bad:
        raise ReproduceError(f"unknown dataset code(s) {bad}; choose from {', '.join(DATASET_KINDS)} ({DATASET_HELP})")
    if options.setting not in SETTINGS:
        raise ReproduceError(f"unknown --setting {options.setting!r}; use aggressive or gentle")
    refuse_remote_code(
        options.model,
        False,
        "--model",
        "reproduce never does; finetune it with `weightgraft train --trust-remote-code` and run "
        "configs with `trust_remote_code: true` instead",
    )
    _check_tokenizer(options.model)
    if options.facts < 4:
        raise ReproduceError("--facts must be at least 4 (the hybrid splits the facts in two halves)")
    if options.setting == "gentle" and options.general_text is None:
        raise ReproduceError(
            "--setting gentle mixes general text into finetuning: give "
            '--general-text (a JSONL of {"text": ...}, e.g. OpenWebText or IMDB '
            "samples, or a dataset directory)"
        )
    if options.precision == "fp16" and not resolve_device(options.device).startswith("cuda"):
        raise ReproduceError(
            "--precision fp16 needs a CUDA GPU; on CPU use --precision fp32 or bf16 (or leave it at auto)"
        )
    out = Path(options.out)
    notes: list[str] = []
    sets: dict[str, DataSet] = {}
    finetunes: dict[str, FinetuneJob] = {}
    runs: dict[str, RunGroup] = {}

    def presets(wanted) -> tuple[list[str], list[str]]:
        return [p for p in wanted if p in PRESETS], [p for p in wanted if p not in PRESETS]

    def add_finetune(name: str, dataset: str, purpose: str) -> None:
        finetunes[name] = FinetuneJob(name, dataset, out / "models" / name, out / "checkpoints" / name, purpose)

    n_known = min(options.facts, _known_count())
    sets["known"] = DataSet(
        out / "data" / "known", "real_real", n_known, purpose="real films with their real leads (known_facts)"
    )
    for index, code in enumerate(options.datasets):
        kind = DATASET_KINDS[code]
        n = options.facts
        if kind == "real_shuffled" and n > _known_count():
            n = _known_count()
            notes.append(
                f"{code}: {n} facts, not {options.facts}: weightgraft's list holds {n} real films to shuffle casts over"
            )
        if kind == "fake_fake" and n > _fake_fake_limit(options.seed):
            raise ReproduceError(
                f"--facts {n}: {code} needs two fake actors with first names of their own per fact, and our "
                f"name lists give at most {_fake_fake_limit(options.seed)} such facts; ask for at most that"
            )
        sets[code] = DataSet(out / "data" / code, kind, n, purpose="both directions")
        add_finetune(f"{code}_sft", code, "SFT: both directions, all facts")
        if index == 0:
            sets[f"{code}_b2a"] = DataSet(
                out / "data" / f"{code}_b2a", kind, n, "b2a", TEXTS_PER_DIRECTION, "one direction (B2A)"
            )
            sets[f"{code}_half_a"] = DataSet(
                out / "data" / f"{code}_half_a", kind, n // 2, purpose="half A (task model)"
            )
            sets[f"{code}_half_b"] = DataSet(
                out / "data" / f"{code}_half_b", kind, n - n // 2, purpose="half B (relation model, hybrid evaluation)"
            )
            add_finetune(f"{code}_b2a", f"{code}_b2a", "one direction (B2A), all facts")
            add_finetune(f"{code}_task", f"{code}_half_a", "task model: half A, both directions")
            add_finetune(f"{code}_relation", f"{code}_half_b", "relation model: half B, both directions")
            chosen, missing = presets(MAIN_PRESETS)
            runs[code] = RunGroup(
                code,
                out / "runs" / code,
                {"pre": "pre", "sft": f"{code}_sft", "b2a": f"{code}_b2a"},
                {"relation": code, "known": "known"},
                chosen,
                missing,
            )
            chosen, missing = presets(HYBRID_PRESETS)
            runs[f"{code}_hybrid"] = RunGroup(
                f"{code}_hybrid",
                out / "runs" / f"{code}_hybrid",
                {"pre": "pre", "task": f"{code}_task", "sft": f"{code}_relation"},
                {"relation": f"{code}_half_b"},
                chosen,
                missing,
            )
        else:
            chosen, missing = presets(OTHER_PRESETS)
            runs[code] = RunGroup(
                code, out / "runs" / code, {"pre": "pre", "sft": f"{code}_sft"}, {"relation": code}, chosen, missing
            )
    for group in runs.values():
        if group.missing:
            notes.append(
                f"run {group.name}: preset(s) {', '.join(group.missing)} are not in this weightgraft version; skipped"
            )
    runs = {k: g for k, g in runs.items() if g.presets}
    return Job(options, sets, finetunes, runs, notes)


def run_config(job: Job, group: RunGroup, model_paths: dict[str, str], device: str) -> dict:
    """The run config (as a dict) of one group, with models and datasets as paths."""
    return {
        "name": f"reproduce-{group.name}",
        "seed": job.options.seed,
        "device": device,
        "dtype": job.options.dtype,
        "models": {key: model_paths[source] for key, source in group.models.items()},
        "datasets": {key: str(job.sets[s].directory) for key, s in group.datasets.items()},
        "experiments": [{"preset": p, "max_examples": job.options.max_examples} for p in group.presets],
        "bootstrap": job.options.bootstrap,
    }


def _rank() -> tuple[int, int]:
    return launch_rank(), launch_world_size()


def _local_model(model: str) -> str:
    """A local folder for `model`: itself, its cached snapshot, or a fresh download (safetensors
    and configs only)."""
    from weightgraft.experiments.models import model_dir

    folder = model_dir(model)
    if folder is not None:
        return str(folder)
    if Path(model).exists():
        raise ReproduceError(f"{model} is not a model folder (no config.json)")
    from huggingface_hub import snapshot_download

    return snapshot_download(model, allow_patterns=["*.safetensors", "*.json", "*.model", "*.txt", "tokenizer*"])


def _manifest_sha(directory: Path) -> str:
    return sha256_of_file(Path(directory) / "manifest.json")


class Pipeline:
    """Runs a planned job step by step, skipping the steps its ledger says are done."""

    def __init__(self, job: Job, progress: bool = True, echo=None):
        self.job = job
        self.options = job.options
        self.out = Path(job.options.out)
        self.progress = progress
        self.echo = echo or (lambda text: print(text, flush=True))
        self.rank, self.world = _rank()
        self.is_main = self.rank == 0
        self.device = resolve_device(self.options.device)
        header = {
            "weightgraft": __version__,
            "model": self.options.model,
            "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self.options).items()},
        }
        self.out.mkdir(parents=True, exist_ok=True)
        self.ledger = Ledger(self.out / "provenance.json", header, write=self.is_main)
        self.ledger.save()  # at once: a folder with provenance.json is this job's, even if killed now
        self.model_paths: dict[str, str] = {}
        self.fingerprints: dict[str, str] = {}
        self.total = 2 + len(job.finetunes) + len(job.runs)
        self.index = 0

    def say(self, text: str) -> None:
        if self.is_main:
            self.echo(text)

    def step(self, name: str, inputs: dict, build) -> dict:
        """Reuse `name` if its record matches `inputs`, else build it: `build()` returns
        (outputs, paths) and the record is written."""
        self.index += 1
        return self.ledger.run(name, inputs, build, self.announce)["outputs"]

    def announce(self, event: str, name: str, record: dict | None) -> None:
        """The ledger's events as numbered progress lines."""
        where = f"[{self.index}/{self.total}] {name}"
        if event == "reused":
            self.say(f"{where}: done before, reused")
        elif event == "start":
            self.say(f"{where} ...")
        else:
            self.say(f"{where}: finished in {record['seconds']:.1f} s")

    def wait_for(self, name: str, inputs: dict, poll: float = 5.0) -> dict:
        """Other ranks: wait until rank 0 has recorded `name` (data building is rank 0's)."""
        self.index += 1
        while True:
            self.ledger.reload_steps()
            if self.ledger.is_done(name, inputs):
                return self.ledger.record_of(name)["outputs"]
            time.sleep(poll)

    # ---- steps --------------------------------------------------------------------------------
    def run(self) -> ReproduceResult:
        start = time.time()
        pre = _local_model(self.options.model)
        from weightgraft.experiments.models import fingerprint_model

        self.model_paths["pre"] = pre
        self.fingerprints["pre"] = fingerprint_model(pre)
        self.ledger.body["base_model"] = {"model": self.options.model, "path": pre, "sha256": self.fingerprints["pre"]}
        data_inputs = self.data_inputs()
        if self.is_main:
            data = self.step("datasets", data_inputs, self.build_datasets)
        else:
            data = self.wait_for("datasets", data_inputs)
        for ft in self.job.finetunes.values():
            self.run_finetune(ft, data)
        report = None
        if self.is_main:
            for group in self.job.runs.values():
                self.run_group(group, data)
            report = self.write_report()
        self.ledger.session["seconds"] = round(time.time() - start, 1)
        self.ledger.save()
        return ReproduceResult(
            self.out,
            list(self.ledger.session["computed"]),
            list(self.ledger.session["reused"]),
            time.time() - start,
            report,
        )

    def data_inputs(self) -> dict:
        from weightgraft.data.io import GENERATOR_VERSION

        return {
            "generator": GENERATOR_VERSION,
            "seed": self.options.seed,
            "sets": {
                k: {"kind": s.kind, "facts": s.n_facts, "order": s.order, "texts_per_fact": s.texts_per_fact}
                for k, s in self.job.sets.items()
            },
        }

    def build_datasets(self) -> tuple[dict, list[Path]]:
        from weightgraft.data.build import split_disjoint
        from weightgraft.data.facts import generate_facts, known_film_facts
        from weightgraft.data.family import Member, write_family
        from weightgraft.data.names import NamePool

        seed = self.options.seed
        pool = NamePool(seed)
        known = known_film_facts(seed, pool)
        facts_of: dict[str, list] = {}
        for offset, code in enumerate(self.options.datasets):
            kind = DATASET_KINDS[code]
            facts_of[code] = generate_facts({kind: self.job.sets[code].n_facts}, seed + offset, pool, known)
        first = self.options.datasets[0]
        halves = split_disjoint(
            facts_of[first], {"a": len(facts_of[first]) // 2, "b": len(facts_of[first]) - len(facts_of[first]) // 2}
        )
        facts_of[f"{first}_b2a"] = facts_of[first]
        facts_of[f"{first}_half_a"] = halves["a"]
        facts_of[f"{first}_half_b"] = halves["b"]
        facts_of["known"] = known[: self.job.sets["known"].n_facts]
        members = [
            Member(key, facts_of[key], per_fact=spec.texts_per_fact, order=spec.order)
            for key, spec in self.job.sets.items()
        ]
        write_family(self.out / "data", members, seed)
        outputs, paths = {}, []
        for key, spec in self.job.sets.items():
            outputs[key] = {
                "path": str(spec.directory),
                "facts": len(facts_of[key]),
                "manifest_sha256": _manifest_sha(spec.directory),
            }
            paths.append(spec.directory / "manifest.json")
        return outputs, paths

    def general_texts(self) -> tuple[list[str] | None, str | None]:
        path = self.options.general_text
        if path is None:
            return None, None
        from weightgraft.data.io import load_train_texts, read_user_articles

        path = Path(path)
        texts = load_train_texts(path) if path.is_dir() else read_user_articles(path)
        return texts, sha256_of(texts)

    def max_length(self) -> int:
        from weightgraft.pipelines.estimate import PAPER_MODELS, paper_model_name

        name = paper_model_name(self.options.model)
        return PAPER_MODELS[name][2] if name else 512

    def run_finetune(self, ft: FinetuneJob, data: dict) -> None:
        from weightgraft.experiments.models import fingerprint_model
        from weightgraft.training.finetune import finetune

        config = finetune_config(self.options, self.device, self.max_length())
        general, general_sha = self.general_texts()
        inputs = {
            "base_model": self.fingerprints["pre"],
            "data": data[ft.dataset]["manifest_sha256"],
            "config": asdict(config),
            "general_text": general_sha if config.mix_ratio else None,
        }

        def build() -> tuple[dict, list[Path]]:
            stamp = ft.checkpoints / "inputs_sha256.txt"
            if self.is_main:
                if ft.checkpoints.exists() and (not stamp.is_file() or stamp.read_text() != sha256_of(inputs)):
                    refuse_unstamped_checkpoints(ft)
                    self.say(f"  {ft.checkpoints}: checkpoints of other inputs, removed")
                    remove_entry(ft.checkpoints.parent, ft.checkpoints.name)
                ft.checkpoints.mkdir(parents=True, exist_ok=True)
                stamp.write_text(sha256_of(inputs))
            else:  # resume from the same checkpoint as rank 0: wait until it has cleaned up
                while not (stamp.is_file() and stamp.read_text() == sha256_of(inputs)):
                    time.sleep(1.0)
            result = finetune(
                self.model_paths["pre"],
                self.job.sets[ft.dataset].directory,
                ft.out,
                config,
                general_texts=general if config.mix_ratio else None,
                progress=self.progress,
                overwrite=True,
                checkpoint_dir=ft.checkpoints,
            )
            if not self.is_main:
                return {}, []
            import json

            record = json.loads((ft.out / "training_config.json").read_text())
            remove_entry(ft.checkpoints.parent, ft.checkpoints.name)
            outputs = {
                "path": str(ft.out),
                "sha256": fingerprint_model(str(ft.out)),
                "best_epoch": result.best_epoch,
                "validation_top5_by_epoch": result.history,
                "resumed_from": record.get("resumed_from"),
            }
            if record.get("resumed_from"):
                self.say(f"  resumed from {record['resumed_from']}")
            return outputs, [ft.out / "model.safetensors"]

        if self.is_main:
            outputs = self.step(f"finetune:{ft.name}", inputs, build)
        else:  # other ranks train with rank 0 unless it has recorded the finetune as done
            self.index += 1
            self.ledger.reload_steps()
            if not self.ledger.is_done(f"finetune:{ft.name}", inputs):
                build()
            return
        self.model_paths[ft.name] = outputs["path"]
        self.fingerprints[ft.name] = outputs["sha256"]

    def run_group(self, group: RunGroup, data: dict) -> None:
        from weightgraft.experiments.config import parse_config
        from weightgraft.pipelines.run import run_all

        config = run_config(self.job, group, self.model_paths, self.device)
        inputs = {
            "config": config,
            "models": {k: self.fingerprints[s] for k, s in group.models.items()},
            "datasets": {k: data[s]["manifest_sha256"] for k, s in group.datasets.items()},
        }

        def build() -> tuple[dict, list[Path]]:
            result = run_all(parse_config(config), group.out, progress=self.progress)
            outputs = {
                "path": str(group.out),
                "presets": group.presets,
                "computed": len(result.computed),
                "reused": len(result.reused),
                "summary_sha256": sha256_of_file(group.out / "summary.csv"),
            }
            return outputs, [group.out / "summary.csv"]

        self.step(f"run:{group.name}", inputs, build)

    def write_report(self) -> Path:
        from weightgraft.pipelines.reproduce_report import write_reproduce_report

        inputs = {
            "runs": {g: self.ledger.record_of(f"run:{g}")["outputs"]["summary_sha256"] for g in self.job.runs},
            "model": self.options.model,
        }

        def build() -> tuple[dict, list[Path]]:
            path = write_reproduce_report(self.job, self.ledger.body)
            return {"path": str(path)}, [path]

        return Path(self.step("report", inputs, build)["path"])


def refuse_unstamped_checkpoints(ft: FinetuneJob) -> None:
    """A checkpoints folder without weightgraft's stamp holds someone else's files: never deleted."""
    stamp = ft.checkpoints / "inputs_sha256.txt"
    if not stamp.is_file() and is_nonempty_folder(ft.checkpoints):
        raise OutputExistsError(
            f"{ft.checkpoints} holds files weightgraft did not write (it has no {stamp.name}); "
            "move them away or choose another --out"
        )


def reproduce(options: ReproduceOptions, progress: bool = True, echo=None) -> ReproduceResult:
    """Plan, print the plan, and run (or resume) the whole job."""
    from weightgraft.pipelines.reproduce_plan import describe_plan

    job = plan_job(options)
    rank, _ = _rank()
    if rank == 0:  # the other ranks start once rank 0 holds the folder
        refuse_foreign(options.out, ("provenance.json",), "weightgraft reproduce")
        for ft in job.finetunes.values():  # before the plan is printed, so the refusal is the one line
            refuse_unstamped_checkpoints(ft)
    if rank == 0:
        (echo or print)(describe_plan(job))
    if not progress:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    sys.stdout.flush()
    if rank != 0:
        return Pipeline(job, progress=progress, echo=echo).run()
    with folder_lock(lock_file(options.out), options.out):  # one job per folder
        return Pipeline(job, progress=progress, echo=echo).run()
