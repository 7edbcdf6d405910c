"""The run's summary, built once from the records: `RunSummary` holds its statistics rows, its
recoveries and its paired comparisons; summary.csv, recovery.csv and comparisons.csv are its
serialisations, one row type (`SummaryRow`, `RecoveryRow`, `ComparisonRow`) each, which is the
file's schema for writing and reading alike. The verdict and the report read the object.

summary.csv: one row per experiment x condition x group x metric, with 95% intervals from a
bootstrap over facts; recovery.csv: every condition's recovery between two reference
conditions; comparisons.csv: paired tests of the pairs the caller names (`ClaimSet.pairs`).

Groups are each evaluation template (with `fact_kind` ALL), every applicable example
(`template` ALL, `fact_kind` ALL: the pooled value), and each fact kind (fake_fake, fake_real,
real_shuffled, ...; with `template` ALL). A condition that is not applicable to a template (it
names a role the template lacks) gets rows with an empty value and n=0, and a matching note in
the report, rather than disappearing.

Every summary row names the definition it was computed in (`fidelity`: `authors`, `clean`,
`authors = clean` where the two graft alike on the model, empty outside the paper presets) and
the wording of the paper's sentences (`wording`).

In memory a value that is not defined (not applicable, undefined recovery) is None, as it reads
back from the files; values keep their full precision, and the files round them to 6 decimals.

Intervals resample facts, not prompts (a fact's prompts succeed or fail together), with one
resample set per experiment shared by all its conditions: see `weightgraft.reporting.statistics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from weightgraft.experiments.record import ExperimentRecord
from weightgraft.experiments.result_files import read_condition
from weightgraft.reporting.claim_types import Claim, ClaimSet
from weightgraft.reporting.experiment_stats import ExperimentStats, experiment_stats, interval_rows, recovery_rows
from weightgraft.reporting.statistics import ALL, PERMUTATIONS, seed_for
from weightgraft.reporting.summary_rows import ComparisonRow, RecoveryRow, SummaryRow, defined, read_rows, write_rows

__all__ = ["ComparisonRow", "RecoveryRow", "RunSummary", "SummaryRow", "build_summary", "by_condition", "pooled"]


COMPARISON_METRICS = ("top5", "prob", "target_logprob")
SUMMARY_FILE, RECOVERY_FILE, COMPARISONS_FILE = "summary.csv", "recovery.csv", "comparisons.csv"


@dataclass(frozen=True)
class RunSummary:
    """Everything the verdict and the report read about a run's numbers.

    rows: summary.csv's rows, experiment by experiment.
    recoveries: recovery.csv's rows (empty without intervals, `bootstrap: 0`).
    comparisons: comparisons.csv's rows (likewise empty without intervals).
    """

    rows: list[SummaryRow]
    recoveries: list[RecoveryRow] = field(default_factory=list)
    comparisons: list[ComparisonRow] = field(default_factory=list)

    @property
    def experiments(self) -> list[str]:
        """The experiments summarized, in the run's order."""
        return list(dict.fromkeys(r.experiment for r in self.rows))

    def write(self, out: Path) -> Path:
        """summary.csv, recovery.csv and comparisons.csv in `out`; returns summary.csv's path."""
        write_rows(out / RECOVERY_FILE, RecoveryRow, self.recoveries)
        write_rows(out / COMPARISONS_FILE, ComparisonRow, self.comparisons)
        return write_rows(out / SUMMARY_FILE, SummaryRow, self.rows)

    @classmethod
    def read(cls, out: Path) -> RunSummary:
        """The summary of a run folder from its files (a missing recovery.csv or
        comparisons.csv, from an older run, reads as no rows)."""
        return cls(read_summary(out), read_recovery(out), read_comparisons(out))


def pooled(rows: list[SummaryRow]) -> list[SummaryRow]:
    """Rows over every fact kind (per template, and ALL): what tables and plots show first."""
    return [r for r in rows if r.fact_kind == ALL]


def by_condition(rows: list[SummaryRow], experiment: str) -> dict[tuple[str, str], SummaryRow]:
    """(condition, metric) -> an experiment's row pooled over every template and fact kind: the
    one number per condition that its table, its plots and its finer sections all show."""
    return {(r.condition, r.metric): r for r in pooled(rows) if r.experiment == experiment and r.template == ALL}


# --- built from the records ---------------------------------------------------------------------


def build_summary(
    out: Path, experiments: list[ExperimentRecord], resamples: int, seed: int, asked: ClaimSet = ClaimSet()
) -> RunSummary:
    """The summary of these experiments (their records, read once by the caller) from their
    per-example files in `out`: intervals
    from `resamples` bootstrap resamples over facts (seeded from `seed` and each experiment's
    name), recoveries against each experiment's references and the reference pairs of
    `asked.claims`, and paired tests of `asked.pairs`. With `resamples` 0 there are no
    intervals: each bound equals the value, and there are no recoveries or comparisons."""
    rows: list[SummaryRow] = []
    recoveries: list[RecoveryRow] = []
    comparisons: list[ComparisonRow] = []
    for record in experiments:
        name = record.name
        stats = experiment_statistics(out, record, resamples, seed)
        fidelity = {c.name: c.fidelity for c in record.conditions}
        rows += interval_rows(stats, fidelity, record.wording)
        for base, full in recovery_references(stats, asked.claims):
            recoveries += recovery_rows(stats, base, full)
        comparisons += comparison_rows(stats, [(a, b) for exp, a, b in asked.pairs if exp == name], seed)
    if resamples == 0:  # no intervals: bounds equal values, and the verdict uses point estimates
        rows = [replace(row, ci_low=row.value, ci_high=row.value) for row in rows]
        recoveries, comparisons = [], []
    return RunSummary(rows, recoveries, comparisons)


def experiment_statistics(out: Path, record: ExperimentRecord, resamples: int, seed: int) -> ExperimentStats:
    """Every condition of one experiment from its per-example files, with one shared resample
    set over facts seeded from the run seed and the experiment's name."""
    name = record.name
    columns = [
        "condition",
        "example_id",
        "fact_id",
        "fact_kind",
        "template",
        "applicable",
        "rank",
        "prob",
        "target_logprob",
        "exact_match",
    ]
    frame = pl.concat(
        [
            pl.DataFrame(read_condition(out / "examples" / name / cond.file))
            .with_columns(condition=pl.lit(cond.name))
            .select(columns)
            for cond in record.conditions
        ]
    )
    return experiment_stats(frame, resamples, seed_for(seed, name), name=name, templates=list(record.templates))


def recovery_references(stats: ExperimentStats, claims: tuple[Claim, ...]) -> list[tuple[str, str]]:
    """(base, full) pairs to report recovery against: PRE and SFT when the experiment has both
    (else its first condition, the recipient alone, and SFT), plus the pairs its claims use."""
    conditions = stats.conditions
    pairs = []
    if "SFT" in conditions:
        base = "PRE" if "PRE" in conditions else conditions[0]
        if base != "SFT":
            pairs.append((base, "SFT"))
    for claim in claims:
        pair = (claim.low, claim.high)
        if claim.experiment == stats.experiment and pair not in pairs and set(pair) <= set(conditions):
            pairs.append(pair)
    return pairs


def comparison_rows(stats: ExperimentStats, pairs: list[tuple[str, str]], seed: int) -> list[ComparisonRow]:
    """Paired sign-flip tests over facts of condition a against b (every template)."""
    rows = []
    for a, b in pairs:
        if a not in stats.conditions or b not in stats.conditions:
            continue
        for metric in COMPARISON_METRICS:
            test = stats.paired(a, b, metric, ALL, PERMUTATIONS, seed_for(seed, f"{stats.experiment}/{a}/{b}/{metric}"))
            rows.append(
                ComparisonRow(
                    experiment=stats.experiment,
                    a=a,
                    b=b,
                    template=ALL,
                    metric=metric,
                    difference=defined(test.difference),
                    ci_low=defined(test.low),
                    ci_high=defined(test.high),
                    effect_size=defined(test.effect_size),
                    p_value=defined(test.p_value),
                    permutations=test.permutations,
                    exact=test.exact,
                    n=test.n_prompts,
                    n_facts=test.n_facts,
                )
            )
    return rows


def read_summary(out: Path) -> list[SummaryRow]:
    """summary.csv's rows (None for not applicable); summaries written before the fact_kind,
    fidelity and wording columns read as ALL, "" and clean."""
    return read_rows(out / SUMMARY_FILE, SummaryRow, {"fact_kind": ALL, "fidelity": "", "wording": "clean"})


def read_recovery(out: Path) -> list[RecoveryRow]:
    """recovery.csv's rows (None for undefined), or [] for a run folder without one."""
    if not (out / RECOVERY_FILE).exists():
        return []
    return read_rows(out / RECOVERY_FILE, RecoveryRow, {"fact_kind": ALL})


def read_comparisons(out: Path) -> list[ComparisonRow]:
    """comparisons.csv's rows, or [] for a run folder without one."""
    if not (out / COMPARISONS_FILE).exists():
        return []
    return read_rows(out / COMPARISONS_FILE, ComparisonRow)
