"""summary.csv: one row per experiment x condition x group x metric, with 95% intervals from a
bootstrap over facts; recovery.csv: every condition's recovery between two reference
conditions; comparisons.csv: paired tests of the paper's pairwise claims.

Groups are each evaluation template (with `fact_kind` ALL), every applicable example
(`template` ALL, `fact_kind` ALL: the pooled value), and each fact kind (fake_fake, fake_real,
real_shuffled, ...; with `template` ALL). A condition that is not applicable to a template (it
names a role the template lacks) gets rows with an empty value and n=0, and a matching note in
the report, rather than disappearing.

Every summary row names the definition it was computed in (`fidelity`: `authors`, `clean`,
`authors = clean` where the two graft alike on the model, empty outside the paper presets) and
the wording of the paper's sentences (`wording`).

Intervals resample facts, not prompts (a fact's prompts succeed or fail together), with one
resample set per experiment shared by all its conditions: see `weightgraft.reporting.statistics`.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import polars as pl

from weightgraft.atomic import write_text_atomic
from weightgraft.experiments.records import read_condition, read_state
from weightgraft.reporting.statistics import ExperimentStats, experiment_stats, interval_rows, recovery_rows, seed_for

COLUMNS = [
    "experiment",
    "condition",
    "template",
    "fact_kind",
    "metric",
    "value",
    "ci_low",
    "ci_high",
    "n",
    "n_facts",
    "fidelity",  # the definition the row was computed in: authors, clean, `authors = clean`, or ""
    "wording",  # the paper sentences' wording: clean or authors
]
RECOVERY_COLUMNS = [
    "experiment",
    "condition",
    "template",
    "fact_kind",
    "metric",
    "base",
    "full",
    "recovery",
    "ci_low",
    "ci_high",
    "gap",
    "gap_low",
    "gap_high",
    "defined",
    "n",
    "n_facts",
]
COMPARISON_COLUMNS = [
    "experiment",
    "a",
    "b",
    "template",
    "metric",
    "difference",
    "ci_low",
    "ci_high",
    "effect_size",
    "p_value",
    "permutations",
    "exact",
    "n",
    "n_facts",
]
COMPARISON_METRICS = ("top5", "prob", "target_logprob")
PERMUTATIONS = 10000
ALL = "ALL"


def _fmt(value: float) -> str:
    return "" if value is None or np.isnan(value) else f"{value:.6f}"


def experiment_statistics(out: Path, name: str, resamples: int, seed: int) -> ExperimentStats:
    """Every condition of one experiment from its per-example files, with one shared resample
    set over facts seeded from the run seed and the experiment's name."""
    state = read_state(out, name)
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
            pl.DataFrame(read_condition(out / "examples" / name / cond["file"]))
            .with_columns(condition=pl.lit(cond["name"]))
            .select(columns)
            for cond in state["conditions"]
        ]
    )
    return experiment_stats(frame, resamples, seed_for(seed, name), name=name, templates=list(state["templates"]))


def labelled(out: Path, name: str, rows: list[dict]) -> list[dict]:
    """The rows with each condition's fidelity and the experiment's wording (from its state)."""
    state = read_state(out, name)
    fidelity = {c["name"]: c.get("fidelity", "") for c in state["conditions"]}
    wording = state.get("wording", "clean")
    return [dict(row, fidelity=fidelity.get(row["condition"], ""), wording=wording) for row in rows]


def summary_rows(out: Path, experiment_names: list[str], resamples: int, seed: int) -> list[dict]:
    return [
        row
        for name in experiment_names
        for row in labelled(out, name, interval_rows(experiment_statistics(out, name, resamples, seed)))
    ]


def recovery_references(stats: ExperimentStats, claims) -> list[tuple[str, str]]:
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


def comparison_rows(stats: ExperimentStats, pairs, seed: int) -> list[dict]:
    """Paired sign-flip tests over facts of condition a against b (every template)."""
    rows = []
    for a, b in pairs:
        if a not in stats.conditions or b not in stats.conditions:
            continue
        for metric in COMPARISON_METRICS:
            test = stats.paired(a, b, metric, ALL, PERMUTATIONS, seed_for(seed, f"{stats.experiment}/{a}/{b}/{metric}"))
            rows.append(
                {
                    "experiment": stats.experiment,
                    "a": a,
                    "b": b,
                    "template": ALL,
                    "metric": metric,
                    "difference": test.difference,
                    "ci_low": test.low,
                    "ci_high": test.high,
                    "effect_size": test.effect_size,
                    "p_value": test.p_value,
                    "permutations": test.permutations,
                    "exact": test.exact,
                    "n": test.n_prompts,
                    "n_facts": test.n_facts,
                }
            )
    return rows


def _write_csv(path: Path, columns: list[str], rows: list[dict]) -> Path:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt(v) if isinstance(v, float) else v for k, v in row.items()})
    return write_text_atomic(path, buffer.getvalue())


def write_summary(
    out: Path, experiment_names: list[str], resamples: int, seed: int, claims=(), paired_tests=()
) -> Path:
    """Recompute summary.csv, recovery.csv and comparisons.csv from the per-example files of the
    named experiments. `claims` add their reference pairs to recovery.csv and `paired_tests`
    ((experiment, a, b) triples) are the rows of comparisons.csv: the caller's (the paper's are
    in `weightgraft.paper.claims`). With `resamples` 0 there are no intervals: each bound
    equals the value and recovery.csv and comparisons.csv hold only their header."""
    rows, recovery, comparisons = [], [], []
    for name in experiment_names:
        stats = experiment_statistics(out, name, resamples, seed)
        rows += labelled(out, name, interval_rows(stats))
        for base, full in recovery_references(stats, claims):
            recovery += recovery_rows(stats, base, full)
        comparisons += comparison_rows(stats, [(a, b) for exp, a, b in paired_tests if exp == name], seed)
    if resamples == 0:  # no intervals: bounds equal values, and the verdict uses point estimates
        for row in rows:
            row["ci_low"] = row["ci_high"] = row["value"]
        recovery, comparisons = [], []
    _write_csv(out / "recovery.csv", RECOVERY_COLUMNS, recovery)
    _write_csv(out / "comparisons.csv", COMPARISON_COLUMNS, comparisons)
    return _write_csv(out / "summary.csv", COLUMNS, rows)


def _read_csv(path: Path, floats: tuple[str, ...], ints: tuple[str, ...], bools: tuple[str, ...] = ()) -> list[dict]:
    rows = []
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            for key in floats:
                row[key] = float(row[key]) if row[key] != "" else None
            for key in ints:
                row[key] = int(row[key]) if row.get(key, "") != "" else None
            for key in bools:
                row[key] = row[key] == "True"
            rows.append(row)
    return rows


def read_summary(out: Path) -> list[dict]:
    """summary.csv as dicts with floats (None for not applicable) and int n (and n_facts)."""
    rows = _read_csv(out / "summary.csv", ("value", "ci_low", "ci_high"), ("n", "n_facts"))
    for row in rows:
        row.setdefault("fact_kind", ALL)
        row.setdefault("fidelity", "")  # summaries written before the column
        row.setdefault("wording", "clean")
    return rows


def pooled(summary: list[dict]) -> list[dict]:
    """Rows over every fact kind (per template, and ALL): what tables and plots show first."""
    return [r for r in summary if r.get("fact_kind", ALL) == ALL]


def read_recovery(out: Path) -> list[dict]:
    """recovery.csv as dicts (None for undefined), or [] for a run folder without one."""
    if not (out / "recovery.csv").exists():
        return []
    rows = _read_csv(
        out / "recovery.csv",
        ("recovery", "ci_low", "ci_high", "gap", "gap_low", "gap_high"),
        ("n", "n_facts"),
        ("defined",),
    )
    for row in rows:
        row.setdefault("fact_kind", ALL)
    return rows


def read_comparisons(out: Path) -> list[dict]:
    """comparisons.csv as dicts, or [] for a run folder without one."""
    if not (out / "comparisons.csv").exists():
        return []
    return _read_csv(
        out / "comparisons.csv",
        ("difference", "ci_low", "ci_high", "effect_size", "p_value"),
        ("permutations", "n", "n_facts"),
        ("exact",),
    )
