"""The typed run summary: built once from the records, its numbers checked against a plain
computation from the per-example files; written as CSV and read back to the same object at the
files' precision; the verdict and the report made from it without reading the files back; and
localize.json through its one schema."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, fields, replace
from pathlib import Path

import polars as pl
import pytest

from exp_fixtures import build_models, gain_donor
from tiny_world import base_config, write_dataset
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.record import ExperimentRecord
from weightgraft.experiments.runner import run_experiments
from weightgraft.pipelines import run as run_pipeline
from weightgraft.reporting import summary as summary_module
from weightgraft.reporting.claim_types import Claim, ClaimSet
from weightgraft.reporting.decision import Outcome
from weightgraft.reporting.localize_results import LocalizeSummary
from weightgraft.reporting.study_contract import Study
from weightgraft.reporting.summary import ComparisonRow, RecoveryRow, RunSummary, SummaryRow, build_summary
from weightgraft.reporting.verdict import MIN_GAP, check_pattern

CONDITIONS = ["PRE", "SFT", "FE+LT", "LT"]
EXPERIMENTS = [{"name": "e", "dataset": "relation", "recipient": "pre", "donor": "gain", "conditions": CONDITIONS}]
# A claim of the caller's own (no paper): FE+LT recovers at least half of SFT's gain over PRE.
ASKED = ClaimSet(
    (Claim("FE+LT half", "e", "FE+LT", "PRE", "SFT", 0.5, "at_least", "FE+LT carries half the gain"),),
    (("e", "FE+LT", "SFT"),),
)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("summary")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(root / "home"))
        models = build_models(root / "models", layers=2)
        models["gain"] = gain_donor(models["pre"], root / "models" / "gain")
        config = parse_config({**base_config(models, write_dataset(root / "data"), EXPERIMENTS), "bootstrap": 50})
        run_experiments(config, root / "out", progress=False)
    return config, root / "out"


def plain_means(out: Path) -> dict[str, dict]:
    """Condition -> top-5, probability, prompt and fact counts over every applicable prompt,
    straight from the Parquet records (no weightgraft code)."""
    state = json.loads((out / "state" / "e.json").read_text())
    means = {}
    for cond in state["conditions"]:
        frame = pl.read_parquet(out / "examples" / "e" / cond["file"]).filter(pl.col("applicable"))
        means[cond["name"]] = {
            "top5": float((frame["rank"] <= 5).cast(pl.Float64).mean()),
            "prob": float(frame["prob"].mean()),
            "n": frame.height,
            "n_facts": frame["fact_id"].n_unique(),
        }
    return means


def pooled_row(rows: list, condition: str, metric: str) -> dict:
    return next(
        r for r in rows if (r.condition, r.template, r.fact_kind, r.metric) == (condition, "ALL", "ALL", metric)
    )


def test_the_summary_built_from_records_matches_a_plain_computation(run):
    config, out = run
    summary = build_summary(out, [ExperimentRecord.read(out, "e")], config.bootstrap, config.seed, ASKED)
    means = plain_means(out)
    assert summary.experiments == ["e"]
    for cond in CONDITIONS:
        for metric in ("top5", "prob"):
            row = pooled_row(summary.rows, cond, metric)
            assert row.value == pytest.approx(means[cond][metric], abs=1e-12)
            assert row.ci_low <= row.value + 1e-12 and row.value <= row.ci_high + 1e-12
            assert (row.n, row.n_facts) == (means[cond]["n"], means[cond]["n_facts"])
    gap = means["SFT"]["top5"] - means["PRE"]["top5"]
    assert gap > 0  # the gain donor gains: the recoveries below are defined numbers
    recovery = next(
        r
        for r in summary.recoveries
        if (r.condition, r.template, r.fact_kind, r.metric, r.base, r.full)
        == ("FE+LT", "ALL", "ALL", "top5", "PRE", "SFT")
    )
    assert recovery.gap == pytest.approx(gap, abs=1e-12)
    assert recovery.defined and recovery.gap_low > 0
    assert recovery.recovery == pytest.approx((means["FE+LT"]["top5"] - means["PRE"]["top5"]) / gap, abs=1e-12)
    compared = {r.metric: r for r in summary.comparisons}
    assert set(compared) == {"top5", "prob", "target_logprob"}
    assert {(r.a, r.b) for r in summary.comparisons} == {("FE+LT", "SFT")}
    assert compared["top5"].difference == pytest.approx(means["FE+LT"]["top5"] - means["SFT"]["top5"], abs=1e-12)


def test_the_files_are_the_summary_at_six_decimals_and_read_back_to_it(run, tmp_path):
    config, out = run
    summary = build_summary(out, [ExperimentRecord.read(out, "e")], config.bootstrap, config.seed, ASKED)
    summary.write(tmp_path)
    for name, row_type, rows in (
        ("summary.csv", SummaryRow, summary.rows),
        ("recovery.csv", RecoveryRow, summary.recoveries),
        ("comparisons.csv", ComparisonRow, summary.comparisons),
    ):
        with open(tmp_path / name, newline="") as handle:
            reader = csv.DictReader(handle)
            written = list(reader)
        assert reader.fieldnames == [f.name for f in fields(row_type)]  # one schema per file
        assert len(written) == len(rows) > 0
        for text, row in zip(written, rows):
            for key, value in asdict(row).items():
                expected = "" if value is None else f"{value:.6f}" if isinstance(value, float) else str(value)
                assert text[key] == expected, (name, key)
    again = RunSummary.read(tmp_path)
    assert again == RunSummary(*(rounded(rows) for rows in (summary.rows, summary.recoveries, summary.comparisons)))
    again.write(tmp_path / "again")
    for name in ("summary.csv", "recovery.csv", "comparisons.csv"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / name).read_bytes()


def rounded(rows: list) -> list:
    return [
        replace(row, **{k: float(f"{v:.6f}") for k, v in asdict(row).items() if isinstance(v, float)}) for row in rows
    ]


def test_the_run_decides_and_reports_from_the_summary_without_reading_the_files_back(run, monkeypatch):
    config, out = run

    def refuse(*args, **kwargs):
        raise AssertionError("a summary file was read back")

    monkeypatch.setattr(summary_module, "read_rows", refuse)
    checks = run_pipeline.summarize(config, out, report=True, study=Study(asked=ASKED))
    assert [c.name for c in checks] == ["FE+LT half"] and checks[0].by_intervals
    report = (out / "report.md").read_text()
    assert f"- **FE+LT half: {checks[0].outcome}.**" in report
    assert "| FE+LT vs SFT (`e`) | top-5 |" in report  # the caller's pair, tested


def test_without_intervals_the_same_rule_decides_the_point_estimate(run):
    config, out = run
    summary = build_summary(out, [ExperimentRecord.read(out, "e")], 0, config.seed, ASKED)
    assert summary.recoveries == [] and summary.comparisons == []
    assert all(r.ci_low == r.value == r.ci_high for r in summary.rows)
    means = plain_means(out)
    pre, sft, fe_lt = (means[c]["top5"] for c in ("PRE", "SFT", "FE+LT"))
    (check,) = check_pattern(summary, ASKED.claims).checks
    assert not check.by_intervals
    assert sft - pre >= MIN_GAP  # a gain to share out: decided, not inconclusive
    recovery = (fe_lt - pre) / (sft - pre)
    assert check.recovery == pytest.approx(recovery, abs=1e-12)
    assert check.outcome == (Outcome.APPEARS if recovery >= 0.5 else Outcome.DOES_NOT_APPEAR)
    assert check.decisions["top5"].low == check.decisions["top5"].high == check.recovery  # the interval [r, r]
    # a gain under MIN_GAP is too little to share out, whatever the recovery
    flat = [replace(r, value=pre + MIN_GAP / 2) if r.condition == "SFT" else r for r in summary.rows]
    assert check_pattern(RunSummary(flat), ASKED.claims).checks[0].outcome == Outcome.INCONCLUSIVE


def test_a_summary_without_claims_decides_nothing_and_tests_no_pair(run):
    config, out = run
    summary = build_summary(out, [ExperimentRecord.read(out, "e")], config.bootstrap, config.seed)
    assert summary.comparisons == []
    assert {(r.base, r.full) for r in summary.recoveries} == {("PRE", "SFT")}
    assert check_pattern(summary, ()).checks == []


def test_outcomes_read_as_their_words():
    assert f"{Outcome.DOES_NOT_APPEAR}" == "does not appear" and Outcome.APPEARS == "appears"


LOCALIZE = {
    "method": "gradient",
    "target_recovery": 0.9,
    "stop_on": ["top5", "prob"],
    "reached": True,
    "chosen": [{"role": "FE", "layer": None, "component": "embed"}, {"role": "LT", "layer": 1, "component": "o#3"}],
    "recovery": {"top5": 0.95, "prob": 0.91},
    "random_recovery_same_size": {"top5": 0.1, "prob": -0.02},
    "baselines": {
        "PRE": {"top5": 0.25, "prob": 0.01},
        "SFT": {"top5": 1.0, "prob": 0.4},
        "FE+LT": {"top5": 0.75, "prob": 0.3, "recovery_top5": 0.6666666666666666, "recovery_prob": 0.7435897435897436},
    },
    "counts": {
        "chosen_groups": 2,
        "fe_lt_groups": 40,
        "chosen_cells_per_prompt": 2.5,
        "fe_lt_cells_per_prompt": 50.0,
        "all_cells_per_prompt": 200.0,
    },
    "examples": 8,
    "intervals": {"chosen": {"top5": {"value": math.nan, "low": math.nan, "high": math.nan, "defined": False}}},
    "seconds": {"attribute": 0.5, "search": 1.25},
    "agreement": {"roles": ["FE", "LT"], "examples": 2, "seconds_attribute_gradient": 0.1, "cells": 12},
    "notes": ["a note"],
}


def test_localize_json_has_one_schema_that_keeps_its_bytes(tmp_path):
    path = tmp_path / "localize.json"
    path.write_text(json.dumps(LOCALIZE, indent=2) + "\n")  # what the writer wrote before the schema
    summary = LocalizeSummary.read(path)
    assert summary.chosen[0].layer is None and summary.counts.fe_lt_groups == 40
    assert summary.to_json() == path.read_text()
    with pytest.raises(ValueError, match="surprise"):
        LocalizeSummary.model_validate({**LOCALIZE, "surprise": 1})
    older = {k: v for k, v in LOCALIZE.items() if k not in ("stop_on", "intervals", "agreement", "notes")}
    assert LocalizeSummary.model_validate(older).stop_on == ["top5", "prob"]


def test_the_report_formats_what_the_run_hands_over_and_reads_no_file(run):
    """Issue 42: the report used to read run.json back; it now gets run.json's body (and the
    localize results) from the caller, so it is written with run.json gone."""
    config, out = run
    done = run_pipeline.RunDone.read(config, out)
    (out / "run.json").rename(out / "run.json.away")
    try:
        run_pipeline.summarize(config, out, report=True, study=Study(asked=ASKED), done=done)
    finally:
        (out / "run.json.away").rename(out / "run.json")
    report = (out / "report.md").read_text()
    assert "## Provenance" in report and f"seed: {config.seed}" in report
    for key, info in done.provenance["models"].items():
        assert f"| {key} | `{info['path']}` |" in report
