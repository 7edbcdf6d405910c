"""summary.csv: one row per experiment x condition x group x metric, with bootstrap 95% CIs.

Groups are each evaluation template (with `fact_kind` ALL), every applicable example
(`template` ALL, `fact_kind` ALL: the pooled value), and each fact kind (fake_fake, fake_real,
real_shuffled, ...; with `template` ALL). A condition that is not applicable to a template (it
names a role the template lacks) gets rows with an empty value and n=0, and a matching note in
the report, rather than disappearing.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from weightgraft.atomic import write_text_atomic
from weightgraft.experiments.metrics import bootstrap_many, example_metric
from weightgraft.experiments.records import read_condition, read_state
from weightgraft.experiments.vocabulary import SUMMARY_METRICS

COLUMNS = ["experiment", "condition", "template", "fact_kind", "metric", "value", "ci_low",
           "ci_high", "n"]
ALL = "ALL"


def _fmt(value: float) -> str:
    return "" if np.isnan(value) else f"{value:.6f}"


def summary_rows(out: Path, experiment_names: list[str], resamples: int, seed: int) -> list[dict]:
    rows = []
    for name in experiment_names:
        state = read_state(out, name)
        for cond in state["conditions"]:
            table = read_condition(out / "examples" / name / cond["file"])
            applicable = np.array(table["applicable"], dtype=bool)
            template_of = np.array(table["template"], dtype=object)
            kind_of = np.array(table["fact_kind"], dtype=object)
            groups = [(t, ALL, template_of == t) for t in state["templates"]]
            groups.append((ALL, ALL, np.ones(len(applicable), dtype=bool)))
            kinds = sorted(set(kind_of.tolist()))
            if len(kinds) > 1 or kinds != ["unknown"]:
                groups += [(ALL, k, kind_of == k) for k in kinds]
            for template, kind, members in groups:
                chosen = applicable & members
                cols = {k: np.array([v for v, keep in zip(table[k], chosen) if keep])
                        for k in ("rank", "prob", "target_logprob", "exact_match")}
                values = {m: example_metric(cols, m) if chosen.any() else np.array([])
                          for m in SUMMARY_METRICS}
                key = f"{name}/{cond['name']}/{template}" + (f"/{kind}" if kind != ALL else "")
                intervals = bootstrap_many(values, resamples, key, seed)
                for metric in SUMMARY_METRICS:
                    point, low, high = intervals[metric]
                    rows.append({"experiment": name, "condition": cond["name"],
                                 "template": template, "fact_kind": kind, "metric": metric,
                                 "value": point, "ci_low": low, "ci_high": high,
                                 "n": int(chosen.sum())})
    return rows


def write_summary(out: Path, experiment_names: list[str], resamples: int, seed: int) -> Path:
    """Recompute summary.csv from the per-example files of the named experiments."""
    rows = summary_rows(out, experiment_names, resamples, seed)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({**row, "value": _fmt(row["value"]), "ci_low": _fmt(row["ci_low"]),
                         "ci_high": _fmt(row["ci_high"])})
    return write_text_atomic(out / "summary.csv", buffer.getvalue())


def read_summary(out: Path) -> list[dict]:
    """summary.csv as dicts with floats (None for not applicable) and int n."""
    rows = []
    with (out / "summary.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            for key in ("value", "ci_low", "ci_high"):
                row[key] = float(row[key]) if row[key] != "" else None
            row["n"] = int(row["n"])
            row.setdefault("fact_kind", ALL)
            rows.append(row)
    return rows


def pooled(summary: list[dict]) -> list[dict]:
    """Rows over every fact kind (per template, and ALL): what tables and plots show first."""
    return [r for r in summary if r.get("fact_kind", ALL) == ALL]
