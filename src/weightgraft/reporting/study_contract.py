"""What a study (one paper's questions) adds to a run's summary and report, as one contract.

The summary, the verdict and the report are generic: they decide the claims, write the paired
tests and show the sections they are given, and import no paper. The caller passes a `Study`
(`weightgraft.paper.study.PAPER` is the paper's; `NO_STUDY` adds nothing), so a second paper is
a second `Study`, not an edit of the reporting layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from weightgraft.experiments.record import ExperimentRecord
from weightgraft.reporting.claim_types import ClaimSet
from weightgraft.reporting.summary import RecoveryRow, SummaryRow
from weightgraft.reporting.verdict import Check


def _nothing(*_args) -> list[str]:
    return []


def _no_explanation(_check: Check, _recovery: list[RecoveryRow]) -> str | None:
    return None


@dataclass(frozen=True)
class Study:
    """asked: the claims to decide on the summary (their reference pairs join recovery.csv) and
    the (experiment, a, b) pairs whose paired tests are the rows of comparisons.csv. explain(check,
    recovery rows): a sentence on where a claim's missing part went, or None.
    experiment_section(summary rows, experiment record): markdown lines under one experiment's
    tables (e.g. published numbers beside this run's). deviations(): markdown lines after the
    verdict (how the run's conditions differ from the study's). verdict_title: the heading of the
    verdict's section."""

    asked: ClaimSet = ClaimSet()
    explain: Callable[[Check, list[RecoveryRow]], str | None] = _no_explanation
    experiment_section: Callable[[list[SummaryRow], ExperimentRecord], list[str]] = _nothing
    deviations: Callable[[], list[str]] = _nothing
    verdict_title: str = "Do the claims hold?"


NO_STUDY = Study()
