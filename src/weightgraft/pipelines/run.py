"""One run, start to finish: experiments (resumable), then summary, then verdict and report.

Data flows one way: the runner writes per-example records; the summary reads them; the verdict
reads the summary; the report reads the summary and the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from weightgraft.errors import UserError
from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.records import run_folder
from weightgraft.experiments.runner import RunResult, run_experiments
from weightgraft.paper.presets import PRESETS  # noqa: F401  (registers the paper's presets)
from weightgraft.paper.study import PAPER
from weightgraft.reporting.study import Study
from weightgraft.reporting.summary import read_recovery, read_summary, write_summary
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
) -> RunOutcome:
    """Run `config` into `out` (resuming), write summary.csv, and unless `report=False` the
    plots, report.md and report.html; returns what was computed and the verdict's checks.
    With `shard=(I, N)` only that shard's examples are run, and nothing is summarized until
    `merge_run` joins the shards (no checks then)."""
    out = Path(out)
    with run_folder(out, shard):
        result = run_experiments(config, out, progress=progress, shard=shard)
        if shard is not None:
            return RunOutcome(result, [])
        for spec in config.localizations():
            from weightgraft.attribution.experiment import run_localize

            run_localize(config, spec, out, progress=progress)
        return RunOutcome(result, summarize(config, out, report))


def summarize(config: RunConfig, out: Path, report: bool = True, study: Study = PAPER) -> list[Check]:
    """summary.csv, the verdict's checks and (unless `report=False`) the report of a run, with
    `study`'s claims and sections (the paper's by default)."""
    names = [e.name for e in config.expanded()]
    write_summary(out, names, config.bootstrap, config.seed, study.claims, study.paired_tests)
    checks = check_pattern(read_summary(out), read_recovery(out), study.claims)
    if report:
        from weightgraft.reporting.report import write_report

        write_report(out, study)
    return checks


def merge_run(out: str | Path, *, report: bool = True) -> list[Check]:
    """Join the shards of the run in `out`, then write its summary and report as `run_all`."""
    from weightgraft.experiments.config import parse_config
    from weightgraft.experiments.shards import merge_shards

    out = Path(out)
    with run_folder(out):
        config = parse_config(merge_shards(out))
        return summarize(config, out, report)


def run_ranks(config: RunConfig, out: str | Path, *, progress: bool = True, report: bool = True) -> RunOutcome:
    """One process of `torchrun`/`accelerate launch`: run this rank's shard, wait for every
    rank, and on rank 0 merge the shards and write the summary and report."""
    from datetime import timedelta

    import torch.distributed as dist

    from weightgraft.experiments.shards import shard_from_env

    shard = shard_from_env()
    if shard is None:
        return run_all(config, out, progress=progress, report=report)
    if config.device.startswith("cuda"):  # one GPU per rank
        import torch

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
            outcome = RunOutcome(outcome.run, merge_run(out, report=report))
        dist.barrier()  # the merged files exist for every rank once this returns
        return outcome
    finally:
        if started_here:
            dist.destroy_process_group()
