"""The report as typed values, computed once after the verdict: what every formatter (report.md,
report.html, the plots) shows, so that none of them computes, decides or reads a file.

`build_run_report` takes what the run handed over (the summary, the verdict, the experiments'
records, run.json's body, the localize results) and the caller's `Study`, and returns a `RunReport`
with one `ExperimentReport` per experiment, in the summary's order.
"""

from __future__ import annotations

from dataclasses import dataclass

from weightgraft.experiments.record import ExperimentRecord
from weightgraft.reporting.finer_findings import FinerFindings, finer_findings
from weightgraft.reporting.localize_results import LocalizeSummary
from weightgraft.reporting.statistics import ALL
from weightgraft.reporting.study_contract import Study
from weightgraft.reporting.summary import RecoveryRow, RunSummary, SummaryRow, pooled
from weightgraft.reporting.verdict import Verdict


@dataclass(frozen=True)
class ExperimentReport:
    """One experiment's part of the report.

    record: its record (conditions, grafts, templates, prompts).
    rows: its summary rows (every template and fact kind); `pooled` ones are over every fact kind.
    recoveries: its recovery rows over every template and fact kind.
    findings: its finer rows' head maps and curves, judged.
    not_applicable: condition -> the templates where none of its prompts applies (headline metric).
    bands: each named layer band its grafts use -> the concrete layers it meant on the recipient.
    """

    record: ExperimentRecord
    rows: list[SummaryRow]
    recoveries: list[RecoveryRow]
    findings: FinerFindings
    not_applicable: dict[str, list[str]]
    bands: dict[str, tuple[int, ...]]

    @property
    def pooled(self) -> list[SummaryRow]:
        return pooled(self.rows)


@dataclass(frozen=True)
class RunReport:
    """The whole run's report: the verdict on the study's claims, one part per experiment, the
    localize results by name and the provenance (run.json's body)."""

    summary: RunSummary
    verdict: Verdict
    study: Study
    experiments: list[ExperimentReport]
    localizations: dict[str, LocalizeSummary]
    provenance: dict


def not_applicable(rows: list[SummaryRow], record: ExperimentRecord) -> dict[str, list[str]]:
    """Condition -> templates with no applicable prompt (n = 0) on the headline metric."""
    metric, out = record.headline[0], {}
    for cond in record.conditions:
        missing = [
            r.template
            for r in rows
            if r.condition == cond.name and r.metric == metric and r.template != ALL and r.n == 0
        ]
        if missing:
            out[cond.name] = missing
    return out


def bands_used(record: ExperimentRecord) -> dict[str, tuple[int, ...]]:
    """Every named band the experiment's grafts use, with the concrete layers it meant here."""
    seen: dict[str, tuple[int, ...]] = {}
    for cond in record.conditions:
        for graft in cond.grafts:
            if isinstance(graft.layers, str) and graft.layer_indices is not None:
                seen[graft.layers] = tuple(graft.layer_indices)
    return seen


def experiment_report(summary: RunSummary, record: ExperimentRecord) -> ExperimentReport:
    """One experiment's part, from the run's summary and its record."""
    rows = [r for r in summary.rows if r.experiment == record.name]
    recoveries = [
        r for r in summary.recoveries if r.experiment == record.name and r.template == ALL and r.fact_kind == ALL
    ]
    return ExperimentReport(
        record,
        rows,
        recoveries,
        finer_findings(pooled(rows), record),
        not_applicable(pooled(rows), record),
        bands_used(record),
    )


def build_run_report(
    summary: RunSummary,
    verdict: Verdict,
    study: Study,
    records: list[ExperimentRecord],
    provenance: dict,
    localizations: dict[str, LocalizeSummary],
) -> RunReport:
    """The run's report, computed once (see the module's docstring)."""
    by_name = {record.name: record for record in records}
    parts = [experiment_report(summary, by_name[name]) for name in summary.experiments]
    return RunReport(summary, verdict, study, parts, localizations, provenance)
