"""`weightgraft demo --size tiny`: the reduced demo CI runs, on the tiny built-in models."""

from __future__ import annotations

import csv
import json
import re

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from training_fixtures import tiny_artifacts, tiny_home
from weightgraft.cli import _register_all, app
from weightgraft.experiments.run_folder import slug

EXPERIMENTS = [
    "position_grafting",
    "position_relation",
    "position_title",
    "components_reversal",
    "components_pre",
    "hybrid",
    "known_facts",
    "layer_sweeps",
    "free_text",
    "activation_patching",
]
CLAIMS = ("FE+LT vs SFT", "(FE+LT)^C vs PRE", "O+FFN vs ATTN+O+FFN", "FFN vs O+FFN (removing O)")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tiny_artifacts()  # built once per test process, shared with the training tests
    out = tmp_path_factory.mktemp("demo")
    _register_all()
    result = CliRunner().invoke(
        app, ["demo", "--size", "tiny", "--home", str(tiny_home()), "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    return out, result.output


def test_demo_runs_every_preset_and_reports(demo):
    out, output = demo
    with open(out / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert list(dict.fromkeys(r["experiment"] for r in rows)) == EXPERIMENTS
    md = (out / "report.md").read_text()
    for check in CLAIMS:
        said = re.search(re.escape(check) + r": (appears|does not appear|inconclusive)\.", output)
        assert said, output
        assert f"**{check}: {said.group(1)}.**" in md
    run = json.loads((out / "run.json").read_text())
    assert set(run["models"]) == {"pre", "sft", "b2a", "task", "freetext"}
    assert md.count("#### Paper vs this model") == 4  # position, both components, hybrid
    assert all(len(m["sha256"]) == 64 for m in run["models"].values())
    assert run["datasets"]["relation"]["manifest"]["seed"] == 0


def test_demo_numbers_match_an_independent_evaluation(demo):
    """SFT's and PRE's top-5 hits per example equal the training layer's own evaluator."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from weightgraft.data.io import load_eval_prompts
    from weightgraft.training.evaluate import topk_hits

    out, _ = demo
    art = tiny_artifacts()
    prompts = {p.id: p for p in load_eval_prompts(art.relation_data)}
    for condition, model_dir in (("SFT", art.relation_model), ("PRE", art.pretrained)):
        rows = pq.read_table(out / "examples" / "position_grafting" / f"{slug(condition)}.parquet").to_pylist()
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        hits = topk_hits(model, tokenizer, [prompts[r["example_id"]] for r in rows], k=5)
        assert [r["rank"] <= 5 for r in rows] == hits


def test_warm_demo_reuses_finished_conditions(demo):
    out, _ = demo
    _register_all()
    again = CliRunner().invoke(
        app, ["demo", "--size", "tiny", "--home", str(tiny_home()), "--out", str(out), "--no-progress"]
    )
    assert again.exit_code == 0, again.output
    run = json.loads((out / "run.json").read_text())
    assert run["sessions"][-1]["computed"] == 0 and run["sessions"][-1]["reused"] > 100


@pytest.mark.parametrize("results_before_the_cut", [0, 7])
def test_a_demo_cut_off_finishes_identically_on_the_next_call(demo, tmp_path, results_before_the_cut):
    """Ctrl-C inside the demo's run (before its first result, and after seven), then the demo
    again: every record, the summary and the report's results equal the uninterrupted demo's."""
    from weightgraft.experiments import result_files
    from weightgraft.pipelines.demo import demo_config
    from weightgraft.pipelines.run import run_all

    clean, _ = demo
    config = demo_config(tiny_artifacts(), size="tiny")
    out = tmp_path / "demo"
    real, seen = result_files.write_condition, []

    def cut(*args):
        if len(seen) >= results_before_the_cut:
            raise KeyboardInterrupt
        seen.append(1)
        return real(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(result_files, "write_condition", cut)
        with pytest.raises(KeyboardInterrupt):
            run_all(config, out, progress=False)
    run_all(config, out, progress=False)
    files = sorted(p.relative_to(clean) for p in clean.glob("examples/*/*.parquet"))
    assert files and files == sorted(p.relative_to(out) for p in out.glob("examples/*/*.parquet"))
    for name in [*files, "summary.csv"]:
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name
    report = (out / "report.md").read_text()
    assert report.split("## Provenance")[0] == (clean / "report.md").read_text().split("## Provenance")[0]
    assert " interrupted (" in report


def test_demo_finer_takes_the_one_direction_models_shape():
    """`demo --finer` adds the finer presets shaped from the built-in B2A model's own config, so
    the plan (no weights) enumerates exactly its fourth quarter's layers and every head."""
    from transformers import AutoConfig

    from weightgraft.experiments.execute import Resources
    from weightgraft.experiments.plan import build_plan
    from weightgraft.pipelines.demo import demo_config

    art = tiny_artifacts()
    config = demo_config(art, size="tiny", finer=True)
    text = AutoConfig.from_pretrained(art.b2a_model).get_text_config()
    plan = build_plan(config, Resources(config))
    heads = plan.experiment("finer_heads_o").conditions
    cells = {
        (c.meta["layer"], c.meta["head"]) for c in heads if c.meta.get("grain") == "head" and "control" not in c.meta
    }
    n, q = text.num_hidden_layers, text.num_hidden_layers // 4
    assert cells == {(layer, h) for layer in range(3 * q, n) for h in range(text.num_attention_heads)}
    assert {"finer_rank", "finer_dose_fe_lt", "finer_dose_o_ffn"} <= {e.name for e in plan.experiments}
