"""`weightgraft reproduce`: the paper's whole pipeline on one model, as one resumable job.

datasets -> finetunes (both directions; one direction, B2A; task on half A; relation on half B)
-> the held-out plain facts each finetune kept -> every paper preset -> one report with "paper vs
this run" tables.

Every step is recorded in `DIR/provenance.json` with the sha256 of its inputs (data manifests,
model fingerprints, the step's config); a step whose record matches is never redone (see
`weightgraft.ledger`). A finetune saves a Trainer checkpoint every epoch under `DIR/checkpoints/`, and a
killed one resumes from the latest. Under `torchrun` / `accelerate launch` every process takes
part in the finetunes (Trainer spreads them); rank 0 alone builds the data, runs the presets and
writes the report, and the other ranks stop after the last finetune.

Layout of DIR:
  provenance.json           steps with their input hashes, outputs, times; one entry per invocation
  data/<set>/               dataset directories (manifest.json hashes every file)
  replay.jsonl              self-replay texts (--replay): the pretrained model's own continuations
  models/<finetune>/        finetuned models (safetensors + training_config.json)
  checkpoints/<finetune>/   Trainer checkpoints while a finetune runs (removed when it is done)
  runs/<group>/             one run folder per group of presets (summary.csv, report.md)
  report.md                 the paper-vs-this-run report
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from huggingface_hub import snapshot_download
from transformers.utils import logging as hf_logging

from weightgraft._version import __version__
from weightgraft.data.build import split_disjoint
from weightgraft.data.facts import generate_facts, known_film_facts
from weightgraft.data.family import Member, write_family
from weightgraft.data.io import GENERATOR_VERSION, load_train_texts, read_user_articles
from weightgraft.data.names import NamePool
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.models import fingerprint_model, model_dir
from weightgraft.folder_ownership import (
    OutputExistsError,
    claim_folder,
    is_nonempty_folder,
    refuse_foreign,
    release_unused,
    remove_entry,
    remove_owned,
    seal_folder,
    write_text_atomic,
)
from weightgraft.ledger import Ledger, stamp_matches, write_stamp
from weightgraft.locking import folder_lock, lock_file
from weightgraft.paper.neutral_prompts import NEUTRAL_PROMPTS
from weightgraft.paper.plain_fact_list import plain_fact_candidates
from weightgraft.paper.reproduce_job import (
    DATASET_KINDS,
    FinetuneJob,
    Job,
    ReproduceError,
    RunGroup,
    finetune_config,
    rank_and_world,
    replay_spec,
    run_config,
)
from weightgraft.paper.reproduce_plan import describe_plan
from weightgraft.paper.reproduce_report import write_reproduce_report
from weightgraft.pipelines.run import run_all
from weightgraft.runtime import sha256_file, sha256_json
from weightgraft.training import TRAINING_RECORD

# A finetune's checkpoints folder holds this stamp: the sha256 of the inputs they were made from
# (`ledger.stamp_matches`); checkpoints of other inputs are removed, never resumed from.
CHECKPOINT_STAMP = "inputs_sha256.txt"
REPLAY_FILE = "replay.jsonl"  # the self-replay texts, one {"text": ...} a line


@dataclass
class ReproduceResult:
    out: Path
    computed: list[str]
    reused: list[str]
    seconds: float
    report: Path | None


def _local_model(model: str) -> str:
    """A local folder for `model`: itself, its cached snapshot, or a fresh download (safetensors
    and configs only)."""
    folder = model_dir(model)
    if folder is not None:
        return str(folder)
    if Path(model).exists():
        raise ReproduceError(f"{model} is not a model folder (no config.json)")
    return snapshot_download(model, allow_patterns=["*.safetensors", "*.json", "*.model", "*.txt", "tokenizer*"])


def _manifest_sha(directory: Path) -> str:
    return sha256_file(Path(directory) / "manifest.json")


class Pipeline:
    """Runs a planned job step by step, skipping the steps its ledger says are done."""

    def __init__(self, job: Job, progress: bool = True, echo=None):
        self.job = job
        self.recipe = job.recipe
        self.out = job.recipe.out
        self.progress = progress
        self.echo = echo or (lambda text: print(text, flush=True))
        self.rank, self.world = rank_and_world()
        self.is_main = self.rank == 0
        header = {
            "weightgraft": __version__,
            "model": self.recipe.model,
            "recipe": self.recipe.record(),
        }
        self.out.mkdir(parents=True, exist_ok=True)
        # Paths are kept relative to the job's folder (`portable`), so that it is found done by
        # any spelling of --out and after it is moved: the folder is the job's identity.
        self.ledger = Ledger(self.out / "provenance.json", header, write=self.is_main, base=self.out)
        self.ledger.save()  # at once: a folder with provenance.json is this job's, even if killed now
        self.model_paths: dict[str, str] = {}
        self.fingerprints: dict[str, str] = {}
        self.total = 3 + len(job.finetunes) + len(job.runs) + int(self.recipe.replay)
        self.replay_file: Path | None = None  # set by the replay step when --replay is on
        self.index = 0

    def say(self, text: str) -> None:
        if self.is_main:
            self.echo(text)

    def portable(self, value):
        """`value` (inputs or outputs of a step) with every path inside the job's folder written
        relative to it (`./data/FMRA`): what a step depends on does not name where the folder is."""
        if isinstance(value, dict):
            return {key: self.portable(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.portable(item) for item in value]
        if isinstance(value, str | Path) and Path(value).is_absolute():
            path = Path(value)
            if path == self.out or self.out in path.parents:
                return str(Path(".") / path.relative_to(self.out)) if path != self.out else "."
        return value

    def here(self, stored: str) -> str:
        """A path a step's outputs recorded (`portable`), as a path of the job's folder now."""
        return str(self.out / stored)

    def step(self, name: str, inputs: dict, build) -> dict:
        """Reuse `name` if its record matches `inputs`, else build it: `build()` returns
        (outputs, paths) and the record is written (both with the job folder's paths portable)."""
        self.index += 1

        def portable_build() -> tuple[dict, list[Path]]:
            outputs, paths = build()
            return self.portable(outputs), paths

        return self.ledger.run(name, self.portable(inputs), portable_build, self.announce)["outputs"]

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
            if self.ledger.is_done(name, self.portable(inputs)):
                return self.ledger.record_of(name)["outputs"]
            time.sleep(poll)

    # ---- steps --------------------------------------------------------------------------------
    def run(self) -> ReproduceResult:
        start = time.time()
        self.find_base_model()
        data_inputs = self.data_inputs()
        if self.is_main:
            data = self.step("datasets", data_inputs, self.build_datasets)
        else:
            data = self.wait_for("datasets", data_inputs)
        if self.recipe.replay:
            self.make_replay()
        for ft in self.job.finetunes.values():
            self.run_finetune(ft, data)
        report = None
        if self.is_main:
            self.check_knowledge()
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

    def find_base_model(self) -> None:
        """The pretrained model's local folder and fingerprint (every later step's input)."""
        pre = _local_model(self.recipe.model)
        self.model_paths["pre"] = pre
        self.fingerprints["pre"] = fingerprint_model(pre)
        self.ledger.body["base_model"] = {"model": self.recipe.model, "path": pre, "sha256": self.fingerprints["pre"]}

    def data_inputs(self) -> dict:
        return {
            "generator": GENERATOR_VERSION,
            "seed": self.recipe.seed,
            "sets": {
                k: {"kind": s.kind, "facts": s.n_facts, "order": s.order, "texts_per_fact": s.texts_per_fact}
                for k, s in self.job.sets.items()
            },
        }

    def build_datasets(self) -> tuple[dict, list[Path]]:
        seed = self.recipe.seed
        pool = NamePool(seed)
        known = known_film_facts(seed, pool)
        facts_of: dict[str, list] = {}
        for offset, code in enumerate(self.recipe.datasets):
            kind = DATASET_KINDS[code]
            facts_of[code] = generate_facts({kind: self.job.sets[code].n_facts}, seed + offset, pool, known)
        first = self.recipe.datasets[0]
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
        for spec in self.job.sets.values():  # an earlier build's sets (a damaged one): only their own files
            remove_owned(spec.directory.parent, spec.directory.name)
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

    def replay_inputs(self) -> dict:
        """What the replay texts are made from: the pretrained model, the prompts and the spec
        (a changed model, prompt or spec makes them again)."""
        return {
            "base_model": self.fingerprints["pre"],
            "prompts_sha256": sha256_json(list(NEUTRAL_PROMPTS)),
            "spec": replay_spec(self.recipe).record(),
        }

    def make_replay(self) -> None:
        """The self-replay step (rank 0 makes it, the other ranks wait for its record)."""
        inputs = self.replay_inputs()
        if self.is_main:
            outputs = self.step("replay", inputs, self.build_replay)
        else:
            outputs = self.wait_for("replay", inputs)
        self.replay_file = Path(self.here(outputs["path"]))

    def build_replay(self) -> tuple[dict, list[Path]]:
        """The pretrained model's own continuations of the neutral prompts, written atomically."""
        # here, not at the top: generation loads the engine's decoding helpers and the model
        from weightgraft.paper.replay import replay_texts

        texts = replay_texts(self.model_paths["pre"], NEUTRAL_PROMPTS, replay_spec(self.recipe), self.recipe.device)
        path = self.out / REPLAY_FILE
        write_text_atomic(path, "".join(json.dumps({"text": text}) + "\n" for text in texts))
        return {"path": str(path), "texts": len(texts), "texts_sha256": sha256_json(texts)}, [path]

    def general_texts(self) -> tuple[list[str] | None, str | None]:
        """The general text mixed into the finetunes: the user's (--general-text), then the
        self-replay texts (--replay); with its sha256, a finetune's input."""
        texts: list[str] = []
        if self.recipe.general_text is not None:
            path = Path(self.recipe.general_text)
            texts += load_train_texts(path) if path.is_dir() else read_user_articles(path)
        if self.replay_file is not None:
            texts += read_user_articles(self.replay_file)
        return (texts, sha256_json(texts)) if texts else (None, None)

    def run_finetune(self, ft: FinetuneJob, data: dict) -> None:
        """One finetune as a ledger step (every rank trains; rank 0 records)."""
        config = finetune_config(self.recipe)
        general, general_sha = self.general_texts()
        inputs = {
            "base_model": self.fingerprints["pre"],
            "data": data[ft.dataset]["manifest_sha256"],
            "config": config.record(),
            "general_text": general_sha if config.mix_ratio else None,
        }

        def build() -> tuple[dict, list[Path]]:
            self.claim_checkpoints(ft, inputs)
            return self.finetune_once(ft, config, general)

        if self.is_main:
            outputs = self.step(f"finetune:{ft.name}", inputs, build)
        else:  # other ranks train with rank 0 unless it has recorded the finetune as done
            self.index += 1
            self.ledger.reload_steps()
            if not self.ledger.is_done(f"finetune:{ft.name}", self.portable(inputs)):
                build()
            return
        self.model_paths[ft.name] = self.here(outputs["path"])
        self.fingerprints[ft.name] = outputs["sha256"]

    def claim_checkpoints(self, ft: FinetuneJob, inputs: dict) -> None:
        """Rank 0: remove checkpoints made from other inputs and stamp the folder with these;
        other ranks wait for that stamp, so that every rank resumes from the same checkpoint."""
        stamp = ft.checkpoints / CHECKPOINT_STAMP
        if not self.is_main:
            while not stamp_matches(stamp, inputs):
                time.sleep(1.0)
            return
        if ft.checkpoints.exists() and not stamp_matches(stamp, inputs):
            refuse_unstamped_checkpoints(ft)
            self.say(f"  {ft.checkpoints}: checkpoints of other inputs, removed")
            remove_entry(ft.checkpoints.parent, ft.checkpoints.name)
        ft.checkpoints.mkdir(parents=True, exist_ok=True)
        write_stamp(stamp, inputs)

    def finetune_once(self, ft: FinetuneJob, config, general: list[str] | None) -> tuple[dict, list[Path]]:
        """Train `ft` (resuming from its checkpoints); on rank 0, its ledger outputs."""
        # here, not at the top: training.finetune brings transformers' Trainer, measured at 2.4 s
        # more for `weightgraft reproduce`'s start (its --dry-run plan) on a loaded 2-core machine
        from weightgraft.training.finetune import finetune

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
        record = json.loads((ft.out / TRAINING_RECORD).read_text())
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

    def knowledge_inputs(self) -> dict:
        """What the held-out check depends on: every model's fingerprint, the candidates, the seed."""
        return {
            "models": {"pre": self.fingerprints["pre"]} | {n: self.fingerprints[n] for n in self.job.finetunes},
            "candidates_sha256": sha256_json(plain_fact_candidates()),
            "seed": self.recipe.seed,
        }

    def check_knowledge(self) -> None:
        """The held-out plain facts PRE knows, and what each finetune kept of them (rank 0, once;
        the report formats the value the step recorded)."""

        def build() -> tuple[dict, list[Path]]:
            # here, not at the top: the check loads every model in turn
            from weightgraft.paper.plain_facts import held_out_knowledge

            models = {"pre": self.model_paths["pre"]} | {n: self.model_paths[n] for n in self.job.finetunes}
            result = held_out_knowledge(models, plain_fact_candidates(), self.recipe.device, self.recipe.seed)
            return {"known": len(result.facts), "result": result.record()}, []

        self.step("knowledge", self.knowledge_inputs(), build)

    def run_group(self, group: RunGroup, data: dict) -> None:
        config = run_config(self.job, group, self.model_paths)
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
                "summary_sha256": sha256_file(group.out / "summary.csv"),
            }
            return outputs, [group.out / "summary.csv"]

        self.step(f"run:{group.name}", inputs, build)

    def write_report(self) -> Path:
        inputs = {
            "runs": {g: self.ledger.record_of(f"run:{g}")["outputs"]["summary_sha256"] for g in self.job.runs},
            "knowledge": sha256_json(self.ledger.record_of("knowledge")["outputs"]),
            "model": self.recipe.model,
        }

        def build() -> tuple[dict, list[Path]]:
            path = write_reproduce_report(self.job, self.ledger.body)
            return {"path": str(path)}, [path]

        return Path(self.here(self.step("report", inputs, build)["path"]))


# Every entry a reproduce job writes at the top of its folder: its record lists those present.
REPRODUCE_ENTRIES = ("provenance.json", "report.md", "data", REPLAY_FILE, "models", "checkpoints", "runs")


def refuse_unstamped_checkpoints(ft: FinetuneJob) -> None:
    """A checkpoints folder without weightgraft's stamp holds someone else's files: never deleted."""
    stamp = ft.checkpoints / CHECKPOINT_STAMP
    if not stamp.is_file() and is_nonempty_folder(ft.checkpoints):
        raise OutputExistsError(
            f"{ft.checkpoints} holds files weightgraft did not write (it has no {stamp.name}); "
            "move them away or choose another --out"
        )


def reproduce(job: Job, progress: bool = True, echo=None) -> ReproduceResult:
    """Print the plan of `job` (from `plan_job`) and run (or resume) it, step by step.

    Args:
        job: the planned job; its recipe's folder (absolute) is the job's identity.
        progress: show progress bars.
        echo: where lines go (print by default).

    Returns:
        What was computed and reused, the time taken and the report's path.

    Raises:
        OutputExistsError: the folder holds files another command or the user wrote.
    """
    out = job.recipe.out
    rank, _ = rank_and_world()
    if rank == 0:  # the other ranks start once rank 0 holds the folder
        refuse_foreign(out, "reproduce", ("provenance.json",))
        for ft in job.finetunes.values():  # before the plan is printed, so the refusal is the one line
            refuse_unstamped_checkpoints(ft)
    if not progress:  # before the plan, whose calibration loads the model
        hf_logging.disable_progress_bar()
    if rank == 0:
        (echo or print)(describe_plan(job))
    sys.stdout.flush()
    if rank != 0:
        return Pipeline(job, progress=progress, echo=echo).run()
    made = not out.exists()
    try:
        with folder_lock(lock_file(out), out):  # one job per folder
            claim_folder(out, "reproduce")
            try:
                return Pipeline(job, progress=progress, echo=echo).run()
            finally:
                seal_folder(out, "reproduce", [n for n in REPRODUCE_ENTRIES if (out / n).exists()])
    finally:
        release_unused(out, made)
