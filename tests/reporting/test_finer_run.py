"""`finer_rank` end to end on tiny models through the runner: the report's rank table holds
summary.csv's numbers, every rank point and the random-layer controls were computed, and the
rank curve is drawn."""

from __future__ import annotations

import csv

import pytest

from exp_fixtures import build_models
from tiny_world import write_dataset
from weightgraft.errors import UserError
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.execute import Resources
from weightgraft.experiments.plan import build_plan
from weightgraft.paper.finer_presets import RANKS
from weightgraft.pipelines.run import run_all


@pytest.fixture(scope="module")
def finer_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("finer")
    models = build_models(root / "models", layers=4)
    config = {
        "name": "finer-test",
        "seed": 1,
        "bootstrap": 50,
        "models": models,
        "datasets": {"relation": write_dataset(root / "data")},
        "experiments": [{"preset": "finer_rank", "max_examples": 6, "hidden_size": 32}],
    }
    run_all(parse_config(config), root / "out", progress=False)
    return root / "out"


def _pooled(out, metric: str) -> dict[str, dict]:
    with open(out / "summary.csv") as handle:
        return {
            r["condition"]: r
            for r in csv.DictReader(handle)
            if r["experiment"] == "finer_rank"
            and r["template"] == "ALL"
            and r["fact_kind"] == "ALL"
            and r["metric"] == metric
        }


def _cell(row: dict) -> str:
    return f"{float(row['value']):.3f} [{float(row['ci_low']):.2f}, {float(row['ci_high']):.2f}]"


def test_rank_table_equals_summary(finer_run):
    top5, prob = _pooled(finer_run, "top5"), _pooled(finer_run, "prob")
    names = [f"O+FFN rank {k}" for k in RANKS] + ["O+FFN"]
    controls = [f"O+FFN [random {i}]" for i in (1, 2, 3)]
    assert set(names + controls + ["B2A", "SFT", "ATTN+O+FFN"]) <= set(top5)
    md = (finer_run / "report.md").read_text()
    section = md.split("### O+FFN by rank of the change")[1].split("\n### ")[0].split("\n## ")[0]
    assert "not a finding of the paper" in section
    lines = section.splitlines()
    for label, name in [*zip([str(k) for k in RANKS], names[:-1]), ("full", "O+FFN")]:
        row = next(line for line in lines if line.startswith(f"| {label} | "))
        assert row.startswith(f"| {label} | {_cell(top5[name])} | {_cell(prob[name])} | ")
    for i, name in enumerate(controls, 1):
        assert f"| random control {i} at full (`{name}`) | {_cell(top5[name])} | {_cell(prob[name])} |" in section
    assert f"| the whole component (`ATTN+O+FFN`) | {_cell(top5['ATTN+O+FFN'])} |" in section
    assert (finer_run / "plots" / "finer_rank_rank.png").stat().st_size > 1000
    assert "![finer_rank_rank](plots/finer_rank_rank.png)" in md


def test_heads_preset_refuses_a_model_of_another_shape(finer_run, tmp_path):
    """finer_heads_o enumerates layers and heads: given the wrong depth or head count it would
    graft other layers or heads without a word, so the plan refuses it naming both shapes; the
    right shape plans every (layer, head) cell of the fourth quarter."""
    root = finer_run.parent
    models = {k: str(root / "models" / k) for k in ("pre", "sft", "task", "b2a")}

    def config(layers: int, heads: int) -> dict:
        return {
            "models": models,
            "datasets": {"relation": str(root / "data")},
            "experiments": [{"preset": "finer_heads_o", "max_examples": 2, "num_layers": layers, "num_heads": heads}],
        }

    resources = Resources(parse_config(config(4, 4)))
    plan = build_plan(parse_config(config(4, 4)), resources)
    cells = [
        c.meta for c in plan.experiments[0].conditions if c.meta.get("grain") == "head" and "control" not in c.meta
    ]
    assert sorted((m["layer"], m["head"]) for m in cells) == [(3, h) for h in range(4)]
    for layers, heads, said in ((8, 4, "num_layers 8"), (4, 2, "num_heads 2")):
        with pytest.raises(UserError, match=f"written for {said}, but models.b2a has num_"):
            build_plan(parse_config(config(layers, heads)), resources)
