"""What a study (one paper's questions) adds to a run's summary and report, as one contract.

The summary, the verdict and the report are generic: they decide the claims, write the paired
tests and show the sections they are given, and import no paper. The caller passes a `Study`
(`weightgraft.paper.study.PAPER` is the paper's; `NO_STUDY` adds nothing), so a second paper is
a second `Study`, not an edit of the reporting layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from weightgraft.reporting.verdict import Check, Claim


def _nothing(*_args) -> list[str]:
    return []


def _no_explanation(_check: Check, _recovery: list[dict]) -> str | None:
    return None


@dataclass(frozen=True)
class Study:
    """claims: decided on the summary (the verdict section; their reference pairs join
    recovery.csv). paired_tests: (experiment, a, b) rows of comparisons.csv. explain(check,
    recovery rows): a sentence on where a claim's missing part went, or None.
    experiment_section(summary rows, experiment state): markdown lines under one experiment's
    tables (e.g. published numbers beside this run's). deviations(): markdown lines after the
    verdict (how the run's conditions differ from the study's)."""

    claims: tuple[Claim, ...] = ()
    paired_tests: tuple[tuple[str, str, str], ...] = ()
    explain: Callable[[Check, list[dict]], str | None] = _no_explanation
    experiment_section: Callable[[list[dict], dict], list[str]] = _nothing
    deviations: Callable[[], list[str]] = _nothing


NO_STUDY = Study()
