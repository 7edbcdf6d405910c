"""The run plan (experiments/plan/types.py, built by plan.build_plan): made from the configs
without any weights, a JSON round trip that gives the same plan, pending chunks that are exactly
what a run folder lacks, and merges that refuse shards made under another plan."""

from __future__ import annotations

import json
import shutil

import pytest

from exp_fixtures import build_models
from tiny_world import base_config, write_dataset
from weightgraft.data.io import load_eval_prompts
from weightgraft.errors import UserError
from weightgraft.experiments import execute, models, run_folder
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.execute import Resources
from weightgraft.experiments.plan import RunPlan, build_plan
from weightgraft.experiments.record import ExperimentRecord
from weightgraft.pipelines import merge_run, run_all

PATCH = {
    "name": "patch LT late",
    "method": "activations",
    "grafts": [{"positions": "LT", "layers": "last_half", "components": "BLOCKS"}],
}
QKV = {"name": "qkv FE late", "grafts": [{"positions": "FE", "layers": "last_half", "components": ["q", "k", "v"]}]}
EXPERIMENT = {
    "name": "direct",
    "dataset": "relation",
    "recipient": "pre",
    "donor": "sft",
    "conditions": ["PRE", "SFT", "FE+LT", QKV, PATCH],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    return build_models(root / "models", layers=2), write_dataset(root / "data")


def config(world, data=None):
    paths, dataset = world
    # two conditions a chunk and small batches: several chunks and batches to plan
    body = dict(base_config(paths, data or dataset, [EXPERIMENT]), conditions_per_chunk=2, max_batch_tokens=150)
    return parse_config(body)


def test_the_plan_is_built_from_the_configs_without_weights(world, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model's weights were loaded to plan the run")

    monkeypatch.setattr(execute, "load_model", no_loading)
    monkeypatch.setattr(models, "load_model", no_loading)
    cfg = config(world)
    resources = Resources(cfg)
    plan = build_plan(cfg, resources)
    assert resources._models == {}
    (exp,) = plan.experiments
    assert [c.name for c in exp.conditions] == ["PRE", "SFT", "FE+LT", "qkv FE late", "patch LT late"]
    assert (exp.recipient.num_layers, exp.recipient.tied) == (2, False)
    assert sorted(plan.models) == ["pre", "sft"]
    # concrete layers, as the state file gives them to the report: last_half of 2 layers is [1]
    grafts = {c.name: c.grafts for c in ExperimentRecord.from_plan(exp).conditions}
    assert grafts["qkv FE late"][0].layer_indices == (1,)
    assert grafts["patch LT late"][0].layer_indices == (1,)
    # every prompt of the dataset once, in fixed batches that cover them once each
    ids = [p.id for p in load_eval_prompts(world[1])]
    assert [e.prompt.id for e in exp.examples] == ids
    assert sorted(i for batch in exp.batches for i in batch) == sorted(ids) and len(exp.batches) > 1
    # chunks: conditions sharing recipient, donors and method, two at a time, in order
    assert exp.chunks == [("PRE", "SFT"), ("FE+LT", "qkv FE late"), ("patch LT late",)]
    assert len(set(exp.fingerprints.values())) == 5 and exp.whole_fingerprints == exp.fingerprints


@pytest.mark.parametrize("shard", [None, (1, 3)])
def test_the_plan_round_trips_through_json(world, shard):
    cfg = config(world)
    plan = build_plan(cfg, Resources(cfg), shard)
    body = json.loads(json.dumps(plan.to_json()))
    again = RunPlan.from_json(body)
    assert again == plan
    assert again.to_json() == body
    if shard is not None:  # a shard's own fingerprints differ from the whole run's it records
        (exp,) = plan.experiments
        assert exp.fingerprints != exp.whole_fingerprints
        assert [[e.prompt.id for e in b] for b in exp.my_batches()] == exp.batches[1::3]


def test_pending_chunks_after_a_partial_run_are_exactly_the_missing_ones(world, tmp_path):
    cfg = config(world)
    out = tmp_path / "run"
    plan = build_plan(cfg, Resources(cfg))
    (exp,) = plan.experiments
    fresh = plan.pending(out)
    assert [(c.conditions, c.pending) for c in fresh] == [(c, frozenset(c)) for c in exp.chunks]
    run_all(cfg, out, progress=False, report=False)
    assert plan.pending(out) == []
    run_folder.condition_file(out, "direct", "SFT").unlink()  # lost
    damaged = run_folder.condition_file(out, "direct", "patch LT late")
    damaged.write_bytes(damaged.read_bytes()[:100])  # cut short
    pending = plan.pending(out)
    assert [(c.conditions, c.pending) for c in pending] == [
        (("PRE", "SFT"), frozenset({"SFT"})),
        (("patch LT late",), frozenset({"patch LT late"})),
    ]
    assert exp.status(out).damaged[0][0] == damaged
    result = run_all(cfg, out, progress=False, report=False)
    assert sorted(result.run.computed) == ["direct/SFT", "direct/patch LT late"]
    assert plan.pending(out) == []


def _shard_states(out):
    return [run_folder.state_file(out, "direct", (i, 2)) for i in range(2)]


def test_merge_refuses_a_shard_made_under_another_plan(world, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(world[1], data)
    cfg = config(world, str(data))
    out = tmp_path / "run"
    run_all(cfg, out, progress=False, report=False, shard=(0, 2))
    lines = (data / "eval.jsonl").read_text().splitlines(keepends=True)
    (data / "eval.jsonl").write_text("".join(lines[:-1]))  # one prompt fewer: another plan
    run_all(cfg, out, progress=False, report=False, shard=(1, 2))
    first, second = (json.loads(p.read_text())["merged"]["plan"] for p in _shard_states(out))
    assert first != second
    with pytest.raises(UserError, match="saw different examples or models"):
        merge_run(out, report=False)


def test_merge_checks_each_shard_against_the_plan_it_records(world, tmp_path):
    cfg = config(world)
    out = tmp_path / "run"
    for i in range(2):
        run_all(cfg, out, progress=False, report=False, shard=(i, 2))
    paths = _shard_states(out)
    bodies = [json.loads(p.read_text()) for p in paths]
    assert bodies[0]["merged"] == bodies[1]["merged"]
    assert bodies[0]["merged"]["plan"] == build_plan(cfg, Resources(cfg)).experiments[0].digest()
    paths[1].write_text(json.dumps(dict(bodies[1], merged=dict(bodies[1]["merged"], plan="0" * 64))))
    with pytest.raises(UserError, match="saw different examples or models"):
        merge_run(out, report=False)
    # shards written before the plan was recorded (no `plan` in `merged`) still merge together
    for path, body in zip(paths, bodies):
        path.write_text(json.dumps(dict(body, merged={k: v for k, v in body["merged"].items() if k != "plan"})))
    merge_run(out, report=False)
    whole = json.loads(run_folder.state_file(out, "direct").read_text())
    assert "merged" not in whole and whole["examples"] == [p.id for p in load_eval_prompts(world[1])]
