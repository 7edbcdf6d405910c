"""`weightgraft run` end to end on tiny models: report files, plots, provenance; verdict rules."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml
from typer.testing import CliRunner

from exp_fixtures import build_models
from tiny_world import write_dataset
from weightgraft.cli import _register_all, app
from weightgraft.experiments.models import fingerprint_model
from weightgraft.paper.claims import PAPER_CLAIMS
from weightgraft.paper.study import PAPER
from weightgraft.reporting.summary import RecoveryRow, RunSummary, SummaryRow
from weightgraft.reporting.verdict import Check, check_pattern


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    models = build_models(root / "models", layers=4)
    write_dataset(root / "data")
    config = {
        "name": "cli-test",
        "seed": 1,
        "bootstrap": 100,
        "models": {k: f"models/{k}" for k in models} | {"freetext": "models/sft"},
        "datasets": {"relation": "data"},
        "experiments": [
            {"preset": p, "max_examples": 6}
            for p in ("position_grafting", "components_reversal", "layer_sweeps", "activation_patching")
        ],
    }
    (root / "run.yaml").write_text(yaml.safe_dump(config))
    _register_all()
    result = CliRunner().invoke(app, ["run", str(root / "run.yaml"), "--out", str(root / "out"), "--no-progress"])
    assert result.exit_code == 0, result.output
    return root, result.output


def test_run_writes_report_plots_and_provenance(cli_run):
    root, output = cli_run
    out = root / "out"
    assert "report.md" in output and "FE+LT vs SFT" in output
    md = (out / "report.md").read_text()
    assert "## Does the paper's pattern appear?" in md
    assert "| condition | definition | n | top1 | top5 |" in md  # the paper presets' rows are labelled
    assert "| FE+LT | authors = clean |" in md  # untied Llama: the authors' and clean rows agree
    for title in ("Position grafting", "Layer sweeps", "Activation patching"):
        assert title in md
    html = (out / "report.html").read_text()
    assert html.count("<table>") >= 6 and "<img" in html
    for stem in ("position_grafting", "layer_sweeps", "layer_sweeps_heatmap", "activation_patching"):
        for ext in ("png", "svg"):
            assert (out / "plots" / f"{stem}.{ext}").stat().st_size > 1000
    run = json.loads((out / "run.json").read_text())
    sha = fingerprint_model(str(root / "models" / "sft"))
    assert run["models"]["sft"]["sha256"] == sha and sha[:16] in md
    assert run["seed"] == 1 and "torch" in run["versions"]
    assert run["datasets"]["relation"]["manifest"] == {"name": "test-world", "seed": 0}
    header = (out / "summary.csv").read_text().splitlines()[0]
    assert header == ("experiment,condition,template,fact_kind,metric,value,ci_low,ci_high,n,n_facts,fidelity,wording")
    rows = (out / "summary.csv").read_text().splitlines()
    assert any(r.startswith("position_grafting,FE+LT,ALL,ALL,rank_mean,") for r in rows)
    assert all(r.endswith(",authors = clean,clean") for r in rows if r.startswith("position_grafting,FE+LT,"))
    recovery = (out / "recovery.csv").read_text().splitlines()
    assert recovery[0].startswith("experiment,condition,template,fact_kind,metric,base,full,")
    assert "Recovery (C - PRE) / (SFT - PRE)" in md and "### Paired tests" in md
    assert "| FE+LT vs SFT (`position_grafting`) | top-5 |" in md
    assert len(list((out / "examples" / "layer_sweeps").glob("*.parquet"))) == 5 + 32


def test_report_sets_the_paper_beside_this_model(cli_run):
    """Published top-5 per sentence next to ours, per fact kind tables, layers named."""
    import csv

    root, output = cli_run
    out = root / "out"
    md = (out / "report.md").read_text()
    assert "#### Paper vs this model" in md and "Deviations from the paper's conditions" in md
    with open(out / "summary.csv") as handle:
        ours = {
            (r["condition"], r["template"]): float(r["value"])
            for r in csv.DictReader(handle)
            if r["experiment"] == "position_grafting"
            and r["metric"] == "top5"
            and r["fact_kind"] == "ALL"
            and r["value"]
        }
    section = md.split("## Position grafting")[1].split("\n## ")[0]
    table = section.split("Sentence 3 (`paper_3`):")[1].split("\n\n")[1]
    row = next(line for line in table.splitlines() if line.startswith("| FE+LT |"))
    # published FMRA sentence 3, FE+LT: gemma 1.0, gpt2-xl 1.0, llama 1.0, pythia 0.99
    assert row.split("|")[2].strip() == "authors = clean"
    assert row.split("|")[3:7] == [" 1.00 ", " 1.00 ", " 1.00 ", " 0.99 "]
    assert row.split("|")[7].strip().startswith(f"{ours[('FE+LT', 'paper_3')]:.2f} (n=")
    assert "| condition (top1, by fact kind) | definition | fake_fake | fake_real | real_shuffled | ALL |" in md
    # by fact kind: fake_real against FMRA, published LT averaged over sentences 1-3
    # (gemma (.53+.61+.72)/3, gpt2-xl (.09+.12+.11)/3, llama (.34+.30+.59)/3, pythia (.08+.10+.16)/3)
    kind_table = section.split("Fact kind `fake_real` against the paper's FMRA")[1]
    lt_row = next(line for line in kind_table.splitlines() if line.startswith("| LT |"))
    assert lt_row.split("|")[3:7] == [" 0.62 ", " 0.11 ", " 0.41 ", " 0.11 "]
    assert "This model's unembedding is untied" in section and "clean wording" in section
    # the components' band on a 4-layer model: q = 1, fourth quarter = layers 3..3
    assert "`authors_fourth_quarter` = layer 3" in md
    assert "O+FFN vs ATTN+O+FFN" in output


def test_run_rejects_bad_config_by_name(tmp_path):
    (tmp_path / "bad.yaml").write_text(
        yaml.safe_dump(
            {
                "models": {"pre": "x", "sft": "y"},
                "datasets": {"relation": "d"},
                "experiments": [
                    {
                        "name": "e",
                        "dataset": "relation",
                        "recipient": "pre",
                        "donor": "sft",
                        "conditions": ["PRE", "LT+QQ"],
                    }
                ],
            }
        )
    )
    _register_all()
    result = CliRunner().invoke(app, ["run", str(tmp_path / "bad.yaml")])
    assert result.exit_code == 2 and "QQ" in result.output


def _summary(values: dict) -> list[SummaryRow]:
    return [
        SummaryRow(exp, cond, "ALL", "ALL", "top5", value, value, value, 50, None, "", "clean")
        for (exp, cond), value in values.items()
    ]


def test_verdict_thresholds():
    paper_like = _summary(
        {
            ("position_grafting", "PRE"): 0.05,
            ("position_grafting", "SFT"): 0.95,
            ("position_grafting", "FE+LT"): 0.85,
            ("position_grafting", "(FE+LT)^C"): 0.10,
            ("components_reversal", "B2A"): 0.10,
            ("components_reversal", "ATTN+O+FFN"): 0.80,
            ("components_reversal", "O+FFN"): 0.75,
            ("components_reversal", "FFN"): 0.40,
        }
    )
    checks = check_pattern(RunSummary(paper_like), PAPER_CLAIMS).checks
    assert [c.name for c in checks] == [
        "FE+LT vs SFT",
        "(FE+LT)^C vs PRE",
        "O+FFN vs ATTN+O+FFN",
        "FFN vs O+FFN (removing O)",
    ]
    assert [c.outcome for c in checks] == ["appears"] * 4
    assert checks[3].recovery == pytest.approx((0.40 - 0.10) / (0.75 - 0.10))
    unlike = _summary(
        {
            ("position_grafting", "PRE"): 0.05,
            ("position_grafting", "SFT"): 0.95,
            ("position_grafting", "FE+LT"): 0.50,
            ("position_grafting", "(FE+LT)^C"): 0.60,
            ("components_reversal", "B2A"): 0.10,
            ("components_reversal", "ATTN+O+FFN"): 0.80,
            ("components_reversal", "O+FFN"): 0.40,
            ("components_reversal", "FFN"): 0.39,
        }
    )
    checks = check_pattern(RunSummary(unlike), PAPER_CLAIMS).checks
    assert [c.outcome for c in checks] == ["does not appear"] * 4
    assert "50%" in checks[0].sentence  # (0.50 - 0.05) / (0.95 - 0.05)
    flat = _summary(
        {
            ("position_grafting", "PRE"): 0.1,
            ("position_grafting", "SFT"): 0.15,
            ("position_grafting", "FE+LT"): 0.1,
            ("position_grafting", "(FE+LT)^C"): 0.1,
        }
    )
    assert [c.outcome for c in check_pattern(RunSummary(flat), PAPER_CLAIMS).checks] == ["inconclusive"] * 2


def test_verdict_is_decided_on_the_authors_rows_and_names_a_different_clean_outcome():
    from weightgraft.reporting.verdict_section import verdict_section

    summary = _summary(
        {
            ("position_grafting", "PRE"): 0.0,
            ("position_grafting", "SFT"): 1.0,
            ("position_grafting", "FE+LT"): 0.9,  # authors': the donor's tied unembedding
            ("position_grafting", "FE+LT [clean]"): 0.5,  # clean: the recipient's
            ("position_grafting", "(FE+LT)^C"): 0.1,
        }
    )
    labels = {"FE+LT": "authors", "FE+LT [clean]": "clean"}
    summary = [replace(row, fidelity=labels.get(row.condition, "authors = clean")) for row in summary]
    verdict = check_pattern(RunSummary(summary), PAPER_CLAIMS)
    assert verdict.checks[0].outcome == "appears"
    differ = verdict.clean
    assert list(differ) == ["FE+LT vs SFT"] and differ["FE+LT vs SFT"].outcome == "does not appear"
    text = "\n".join(verdict_section(RunSummary(summary), verdict, PAPER))
    assert "Decided on the authors' definition, the paper's own setting." in text
    assert "In the clean definition (`FE+LT [clean]`) it does not appear instead: recovery 0.50 on top-5." in text
    # (FE+LT)^C has no clean twin: decided alike, no clean line
    assert text.count("In the clean definition") == 1


def _recovery(experiment, condition, base, full, metric, value, low, high, gap=(0.8, 0.7, 0.9)):
    return RecoveryRow(
        experiment, condition, "ALL", "ALL", metric, base, full, value, low, high, *gap, value is not None, 96, 8
    )


@pytest.mark.parametrize(
    "head,expected",
    [
        ((0.95, 0.90, 1.00), "the finetuned unembedding carries the rest of the gain"),
        ((0.70, 0.60, 0.78), "the donor's unembedding adds +0.10 of the gain and the rest lies outside FE+LT"),
        ((0.60, 0.47, 0.76), "the two rows are the same, because the donor's unembedding is already used"),
        ((0.85, 0.70, 0.95), "is not settled by these intervals"),
    ],
)
def test_a_missing_claim_says_what_the_runs_rows_show(head, expected):
    from weightgraft.paper.missing_part import missing_part

    claim = PAPER_CLAIMS[0]  # FE+LT vs SFT, at least 0.8
    rows = []
    for metric in ("top5", "prob"):
        rows.append(_recovery("position_grafting", "FE+LT", "PRE", "SFT", metric, 0.60, 0.47, 0.76))
        rows.append(_recovery("position_grafting", "FE+LT [donor unembedding]", "PRE", "SFT", metric, *head))
    sentence = missing_part(Check(claim.name, "does not appear", "", claim), rows)
    assert expected in sentence
    assert f"FE+LT [donor unembedding] recovers {head[0]:.2f} [{head[1]:.2f}, {head[2]:.2f}]" in sentence
    assert missing_part(Check(claim.name, "appears", "", claim), rows) is None


def test_a_component_claim_without_a_gap_says_the_components_hold_none_of_the_gain():
    from weightgraft.paper.missing_part import missing_part

    claim = PAPER_CLAIMS[2]  # O+FFN vs ATTN+O+FFN, between B2A and ATTN+O+FFN
    rows = [
        _recovery(
            "components_reversal", "O+FFN", "B2A", "ATTN+O+FFN", "top5", None, None, None, (0.025, -0.024, 0.076)
        ),
        _recovery("components_reversal", "ATTN+O+FFN", "B2A", "SFT", "top5", 0.04, -0.03, 0.11, (0.6, 0.5, 0.7)),
        _recovery("components_reversal", "SFT", "B2A", "SFT", "top5", 1.0, 1.0, 1.0, (0.6, 0.5, 0.7)),
    ]
    sentence = missing_part(Check(claim.name, "inconclusive", "", claim), rows)
    assert sentence.startswith("ATTN+O+FFN adds +0.025 [-0.024, +0.076] top-5 to B2A, where SFT adds +0.600")
    assert "ATTN+O+FFN recovers 0.04 [-0.03, 0.11] of it" in sentence
    assert "hold no measurable part of the finetune's gain" in sentence
    # a finetune without a measurable gain: nothing to localise, and the note says so
    rows[2] = _recovery("components_reversal", "SFT", "B2A", "SFT", "top5", None, None, None, (0.0, -0.01, 0.01))
    sentence = missing_part(Check(claim.name, "inconclusive", "", claim), rows)
    assert sentence.startswith("SFT adds +0.000 [-0.010, +0.010] top-5 to B2A: the finetune itself has no")
