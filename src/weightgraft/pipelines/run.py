"""One run, start to finish: experiments (resumable), then summary, then verdict and report.

Data flows one way, forward only: the runner writes per-example records and hands over each
experiment's record and the run's provenance; the localize searches hand over their results
(`RunDone`); the summary (`RunSummary`) is built once from the records and written as its CSV
files; the verdict decides the caller's claims on that object; the report formats the summary,
the verdict and what was handed over. Nothing is read back from the files the run just wrote
(a merge of shards, which has no runner, reads what the shards wrote).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from weightgraft.attribution.experiment import run_localize
from weightgraft.errors import UserError
from weightgraft.experiments.config import RunConfig, parse_config
from weightgraft.experiments.record import ExperimentRecord
from weightgraft.experiments.run_folder import replace_other_run, run_folder, run_json_file
from weightgraft.experiments.run_json import mark_unfinished
from weightgraft.experiments.runner import RunResult, run_experiments
from weightgraft.experiments.shards import merge_shards, shard_from_env
from weightgraft.paper.finer_presets import FINER_PRESETS  # noqa: F401  (registers weightgraft's finer presets)
from weightgraft.paper.presets import PRESETS  # noqa: F401  (registers the paper's presets)
from weightgraft.paper.study import PAPER
from weightgraft.reporting.localize_results import LOCALIZE_FILE, LocalizeSummary
from weightgraft.reporting.report import write_report
from weightgraft.reporting.study_contract import Study
from weightgraft.reporting.summary import build_summary
from weightgraft.reporting.verdict import Check, check_pattern
from weightgraft.runtime import local_rank as launch_local_rank


@dataclass
class RunOutcome:
    run: RunResult
    checks: list[Check]

    @property
    def computed(self) -> list[str]:
        return self.run.computed

    @property
    def reused(self) -> list[str]:
        return self.run.reused


def run_all(
    config: RunConfig,
    out: str | Path,
    *,
    progress: bool = True,
    report: bool = True,
    shard: tuple[int, int] | None = None,
    study: Study = PAPER,
    overwrite: bool = False,
) -> RunOutcome:
    """Run `config` into `out` (resuming), write summary.csv, recovery.csv and comparisons.csv,
    and unless `report=False` the plots, report.md and report.html; returns what was computed
    and the verdict's checks.

    progress: show progress bars. shard: `(I, N)` runs only that shard's examples, and nothing
    is summarized until `merge_run` joins the shards (no checks then). study: the claims to
    decide, the pairs to test and the report's extra sections (default: the paper's).
    overwrite: replace the run of another config found in `out` (else it is refused).
    """
    out = Path(out)
    with run_folder(out, shard):
        replace_other_run(out, config, overwrite and shard is None)
        result = run_experiments(config, out, progress=progress, shard=shard)
        if shard is not None:  # the localize experiments run once, at the merge (`merge_run`)
            return RunOutcome(result, [])
        found = localize_all(config, out, progress)
        done = RunDone(result.records, result.provenance, found)
        return RunOutcome(result, summarize(config, out, report, study, done))


def localize_all(config: RunConfig, out: Path, progress: bool = True) -> dict[str, LocalizeSummary]:
    """Each `localize:` experiment of `config`, searched or reused when done, by name."""
    found: dict[str, LocalizeSummary] = {}
    for spec in config.localizations():
        try:
            folder = run_localize(config, spec, out, progress=progress)
            found[spec.name] = LocalizeSummary.read(folder / LOCALIZE_FILE)  # searched now, or reused
        except UserError as err:
            mark_unfinished(out, f"localize {spec.localize}", err)
            raise named_by_experiment(err, spec.localize) from None
        except BaseException as err:
            mark_unfinished(out, f"localize {spec.localize}", err)
            raise
    return found


def named_by_experiment(err: UserError, name: str) -> UserError:
    """`err` of a run config's `localize:` item, its message led by the experiment it failed
    in (as every other error of a run config is), once."""
    lead = f"localize experiment {name!r}"
    if str(err).startswith(lead):
        return err
    try:
        return type(err)(f"{lead}: {err}")  # the same kind of error, for callers that tell kinds apart
    except TypeError:
        return UserError(f"{lead}: {err}")


@dataclass(frozen=True)
class RunDone:
    """What a finished run hands to its summary and report, so that neither reads files back.

    experiments: each experiment's record as the runner built it (`RunResult.records`).
    provenance: run.json's body as the runner last wrote it (`RunResult.provenance`).
    localizations: each localize experiment's results, by name (searched now, or reused).
    """

    experiments: Sequence[ExperimentRecord]
    provenance: dict
    localizations: dict[str, LocalizeSummary]

    @classmethod
    def read(cls, config: RunConfig, out: Path, localizations: dict[str, LocalizeSummary] | None = None) -> RunDone:
        """The same from the run folder's files, where no runner handed them over (after a
        merge of shards, which wrote them); `localizations` where the caller has them."""
        if localizations is None:
            localizations = {
                s.name: LocalizeSummary.read(out / "localize" / s.name / LOCALIZE_FILE) for s in config.localizations()
            }
        experiments = [ExperimentRecord.read(out, e.name) for e in config.expanded()]
        return cls(experiments, json.loads(run_json_file(out).read_text()), localizations)


def summarize(
    config: RunConfig, out: Path, report: bool = True, study: Study = PAPER, done: RunDone | None = None
) -> list[Check]:
    """Build the summary of a run's records once, write its files, decide `study`'s claims on it
    and (unless `report=False`) write the report from both, with `study`'s sections (the paper's
    by default; `reporting.study_contract.NO_STUDY` for none); returns the verdict's checks.

    done: what the run handed over (`RunDone`); read from the folder when not given, as after a
    merge of shards."""
    done = done or RunDone.read(config, out)
    experiments = list(done.experiments)
    summary = build_summary(out, experiments, config.bootstrap, config.seed, study.asked)
    summary.write(out)
    verdict = check_pattern(summary, study.asked.claims)
    if report:
        write_report(out, summary, verdict, study, experiments, done.provenance, done.localizations)
    return verdict.checks


def merge_run(out: str | Path, *, report: bool = True, study: Study = PAPER, progress: bool = True) -> list[Check]:
    """Join the shards of the run in `out`, run its localize experiments (shards run none: a
    search is not split), then write its summary and report as `run_all`."""
    out = Path(out)
    with run_folder(out):
        config = parse_config(merge_shards(out))
        found = localize_all(config, out, progress)
        return summarize(config, out, report, study, RunDone.read(config, out, found))


def refuse_split_overwrite(overwrite: bool) -> None:
    """--overwrite deletes a whole run's files; a shard doing it would delete the other shards'."""
    if overwrite:
        raise UserError(
            "--overwrite replaces a whole run, so it takes no --shard and no multi-process launch: "
            "run `weightgraft run CONFIG --out RUN_DIR --overwrite` once without them, or choose another --out"
        )


def run_ranks(
    config: RunConfig, out: str | Path, *, progress: bool = True, report: bool = True, overwrite: bool = False
) -> RunOutcome:
    """One process of `torchrun`/`accelerate launch`: run this rank's shard, wait for every
    rank, and on rank 0 merge the shards and write the summary and report. `overwrite` (see
    `run_all`) only without a launch: every rank would delete the others' files."""
    shard = shard_from_env()
    if shard is None:
        return run_all(config, out, progress=progress, report=report, overwrite=overwrite)
    refuse_split_overwrite(overwrite)
    if config.device.startswith("cuda"):  # one GPU per rank
        local_rank = launch_local_rank()
        torch.cuda.set_device(local_rank)
        config = config.model_copy(update={"device": f"cuda:{local_rank}"})
    started_here = not dist.is_initialized()
    if started_here:  # long runs: ranks may finish hours apart before the barrier
        backend = "nccl" if config.device.startswith("cuda") else "gloo"
        dist.init_process_group(backend, timeout=timedelta(days=7))
    try:
        failure = None
        try:
            outcome = run_all(config, out, progress=progress and shard[0] == 0, shard=shard)
        except Exception as err:  # told to every rank below, so that none waits for this one
            failure = err
        failures: list[str | None] = [None] * shard[1]
        dist.all_gather_object(failures, None if failure is None else f"{type(failure).__name__}: {failure}")
        if failure is not None:
            raise failure
        failed = [f"shard {rank}/{shard[1]} ({text})" for rank, text in enumerate(failures) if text]
        if failed:
            raise UserError(
                f"not merged: {'; '.join(failed)} failed on another rank; this rank's shard is complete. "
                "Fix that error and launch again: finished results are reused"
            )
        if shard[0] == 0:
            outcome = RunOutcome(outcome.run, merge_run(out, report=report, progress=progress))
        dist.barrier()  # the merged files exist for every rank once this returns
        return outcome
    finally:
        if started_here:
            dist.destroy_process_group()
