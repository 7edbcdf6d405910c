"""summary.csv: one row per experiment x condition x template x metric, with bootstrap 95% CIs.

Templates are each evaluation template plus `ALL` (every applicable example). A condition that
is not applicable to a template (it names a role the template lacks) gets rows with an empty
value and n=0, and a matching note in the report, rather than disappearing.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from weightgraft.experiments.metrics import SUMMARY_METRICS, bootstrap_many, example_metric
from weightgraft.atomic import write_text_atomic

COLUMNS = ["experiment", "condition", "template", "metric", "value", "ci_low", "ci_high", "n"]
ALL = "ALL"


def _fmt(value: float) -> str:
    return "" if np.isnan(value) else f"{value:.6f}"


def summary_rows(out: Path, experiment_names: list[str], resamples: int, seed: int) -> list[dict]:
    rows = []
    for name in experiment_names:
        state = json.loads((out / "state" / f"{name}.json").read_text())
        templates = [*state["templates"], ALL]
        for cond in state["conditions"]:
            table = pq.read_table(out / "examples" / name / cond["file"]).to_pydict()
            applicable = np.array(table["applicable"], dtype=bool)
            template_of = np.array(table["template"], dtype=object)
            for template in templates:
                chosen = applicable & ((template_of == template) if template != ALL else True)
                cols = {k: np.array([v for v, keep in zip(table[k], chosen) if keep])
                        for k in ("rank", "prob", "target_logprob", "exact_match")}
                values = {m: example_metric(cols, m) if chosen.any() else np.array([])
                          for m in SUMMARY_METRICS}
                key = f"{name}/{cond['name']}/{template}"
                intervals = bootstrap_many(values, resamples, key, seed)
                for metric in SUMMARY_METRICS:
                    point, low, high = intervals[metric]
                    rows.append({"experiment": name, "condition": cond["name"],
                                 "template": template, "metric": metric, "value": point,
                                 "ci_low": low, "ci_high": high, "n": int(chosen.sum())})
    return rows


def write_summary(out: Path, experiments, resamples: int, seed: int) -> Path:
    """Recompute summary.csv from the per-example files of the given experiments."""
    rows = summary_rows(out, [e.name for e in experiments], resamples, seed)
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
            rows.append(row)
    return rows
