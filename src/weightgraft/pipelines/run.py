"""One run, start to finish: experiments (resumable), then summary, then verdict and report.

Data flows one way: the runner writes per-example records; the summary reads them; the verdict
reads the summary; the report reads the summary and the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.runner import RunResult, run_experiments
from weightgraft.reporting.summary import read_recovery, read_summary, write_summary
from weightgraft.reporting.verdict import Check, check_pattern


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


def run_all(config: RunConfig, out: str | Path, *, progress: bool = True,
            report: bool = True) -> RunOutcome:
    """Run `config` into `out` (resuming), write summary.csv, and unless `report=False` the
    plots, report.md and report.html; returns what was computed and the verdict's checks."""
    out = Path(out)
    result = run_experiments(config, out, progress=progress)
    for spec in config.localizations():
        from weightgraft.attribution.experiment import run_localize

        run_localize(config, spec, out, progress=progress)
    write_summary(out, [e.name for e in config.expanded()], config.bootstrap, config.seed)
    checks = check_pattern(read_summary(out), read_recovery(out))
    if report:
        from weightgraft.reporting.report import write_report

        write_report(out)
    return RunOutcome(result, checks)
