"""Finer grafts through the run path (issue 20): heads, neurons and shaped donors in a YAML
condition give per-example scores equal to a direct engine call and, independently, to the slow
per-token reference that builds the modified weights explicitly (tests/support/reference_grafter),
on a grouped-query Llama and a GPT-2 (fused c_attn); the runner's batches are padded (prompts of
several lengths side by side). Controls expand into the conditions the engine would draw."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from exp_fixtures import build_gpt2_models, build_models
from reference_grafter import GraftSpec, reference_logits, reference_unit_logits, shaped_model
from tiny_world import base_config, write_dataset
from weightgraft.data.encode import encode_prompt
from weightgraft.data.io import load_eval_prompts
from weightgraft.donors import ShapedDonor
from weightgraft.engine import Graft, Grafter
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.run_folder import slug
from weightgraft.pipelines import run_all

# float32 rounding between a padded, prefix-shared batch and one unpadded row (as in
# test_experiments_runner); rank must agree exactly.
PROB_TOL = dict(rel=1e-4, abs=1e-6)
LOGPROB_TOL = dict(rel=1e-4, abs=1e-5)


def _graft(name, positions, layers, components, **extra):
    return {"name": name, "grafts": [dict(positions=positions, layers=layers, components=components, **extra)]}


LLAMA_CONDITIONS = [
    "PRE",
    "SFT",
    _graft("O h1 L3", "LT", [3], "O", heads=[1]),
    _graft("K kv1", "FE+LT", "last_half", "K", heads=[1]),  # a key-value head of a GQA model
    _graft("FFN n", "FE+LT", [2], "FFN", neurons=[3, 17, 40]),
    _graft("O+FFN rank 2", "LT", "authors_fourth_quarter", "O+FFN", shape={"rank": 2}),
    _graft("O+FFN rank 4", "LT", "authors_fourth_quarter", "O+FFN", shape={"rank": 4}),
    _graft("FE+LT x0.5", "FE+LT", "all", "all", shape={"scale": 0.5}),
    _graft("O h1 x-1.5 rank 3", "LT", "last_half", "O", heads=[0, 2], shape={"scale": -1.5, "rank": 3}),
]
# The same rows as engine Grafts and reference specs: (positions expression, layers, components,
# heads, neurons, shape)
LLAMA_EXPECTED = {
    "O h1 L3": ("LT", [3], ["o"], [1], None, None),
    "K kv1": ("FE+LT", [2, 3], ["k"], [1], None, None),
    "FFN n": ("FE+LT", [2], ["gate", "up", "down"], None, [3, 17, 40], None),
    "O+FFN rank 2": ("LT", [3], ["o", "gate", "up", "down"], None, None, {"rank": 2}),
    "O+FFN rank 4": ("LT", [3], ["o", "gate", "up", "down"], None, None, {"rank": 4}),
    "FE+LT x0.5": ("FE+LT", "all", "all", None, None, {"scale": 0.5}),
    "O h1 x-1.5 rank 3": ("LT", [2, 3], ["o"], [0, 2], None, {"scale": -1.5, "rank": 3}),
}
GPT2_CONDITIONS = [
    "PRE",
    _graft("Q h2", "FE+LT", "last_half", "Q", heads=[2]),  # a slice of the fused c_attn
    _graft("V h0,3 rank 2", "LT", "all", "V", heads=[0, 3], shape={"rank": 2}),
    _graft("FFN n", "LT", [1, 3], "FFN", neurons=[0, 5, 99]),
    _graft("ATTN+O x2", "FE+LT", "last_half", "ATTN+O", shape={"scale": 2.0}),
]
GPT2_EXPECTED = {
    "Q h2": ("FE+LT", [2, 3], ["q"], [2], None, None),
    "V h0,3 rank 2": ("LT", "all", ["v"], [0, 3], None, {"rank": 2}),
    "FFN n": ("LT", [1, 3], ["up", "down"], None, [0, 5, 99], None),
    "ATTN+O x2": ("FE+LT", [2, 3], ["q", "k", "v", "o"], None, None, {"scale": 2.0}),
}


def _experiment(name, conditions):
    return {"name": name, "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": conditions}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return build_models(tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return build_gpt2_models(tmp_path_factory.mktemp("gpt2"))


def _rows(out, exp, cond):
    return pq.read_table(out / "examples" / exp / f"{slug(cond)}.parquet").to_pylist()


def _scores(logits, n, target):
    logp = torch.log_softmax(logits.float(), -1)
    first = logits[n - 1]
    rank = 1 + sum(1 for v in first.tolist() if v > first[target[0]].item())
    return rank, logp[n - 1, target[0]].exp().item(), sum(logp[n - 1 + j, t].item() for j, t in enumerate(target))


def _mask(enc, expr: str, length: int) -> list[bool]:
    """The row's mask for FE+LT or LT, target tokens copying the last prompt token."""
    n = len(enc.input_ids)
    chosen = {n - 1} | (set(enc.positions["first_entity"]) if expr == "FE+LT" else set())
    return [i in chosen or i >= n for i in range(length)]


def _check_run(models, out, exp, expected):
    """Every row of every expected condition: rank, prob and log-probability equal a direct
    engine call and the per-token reference on the explicitly built weights."""
    tok = AutoTokenizer.from_pretrained(models["pre"])
    pre = AutoModelForCausalLM.from_pretrained(models["pre"]).eval()
    sft = AutoModelForCausalLM.from_pretrained(models["sft"]).eval()
    prompts = {p.id: p for p in load_eval_prompts(exp["data"])}
    lengths = set()
    for cond, (expr, layers, comps, heads, neurons, shape) in expected.items():
        donor = ShapedDonor(sft, **shape) if shape else sft
        explicit = shaped_model(pre, sft, **shape) if shape else sft
        grafter = Grafter(pre, donor)
        for row in _rows(out, exp["name"], cond):
            enc = encode_prompt(tok, prompts[row["example_id"]])
            n, target = len(enc.input_ids), enc.target_ids
            ids = enc.input_ids + target[:-1]
            lengths.add(len(ids))
            mask = _mask(enc, expr, len(ids))
            with torch.no_grad():
                direct = grafter.logits(torch.tensor([ids]), Graft(mask, layers, comps, heads=heads, neurons=neurons))[
                    0
                ]
                spec = GraftSpec(mask, layers, comps, heads=heads, neurons=neurons)
                if heads is None and neurons is None:
                    ref = reference_logits(pre, explicit, torch.tensor(ids), [spec])
                else:
                    ref = reference_unit_logits(pre, explicit, ids, [spec])
            for logits in (direct, ref):
                rank, prob, total = _scores(logits, n, target)
                assert row["rank"] == rank, (cond, row["example_id"])
                assert row["prob"] == pytest.approx(prob, **PROB_TOL), cond
                assert row["target_logprob"] == pytest.approx(total, **LOGPROB_TOL), cond
    assert len(lengths) > 1  # the runner's batches held rows of several lengths (padded)


@torch.no_grad()
def test_llama_finer_conditions_equal_engine_and_reference(llama, data, tmp_path):
    exp = _experiment("finer", LLAMA_CONDITIONS)
    run_all(parse_config(base_config(llama, data, [exp])), tmp_path, progress=False, report=False)
    _check_run(llama, tmp_path, dict(exp, data=data), LLAMA_EXPECTED)
    # the shaped points changed something, and differently from each other
    probs = {c: [r["prob"] for r in _rows(tmp_path, "finer", c)] for c in ("O+FFN rank 2", "O+FFN rank 4", "PRE")}
    assert probs["O+FFN rank 2"] != probs["O+FFN rank 4"] != probs["PRE"]


@torch.no_grad()
def test_gpt2_finer_conditions_equal_engine_and_reference(gpt2, data, tmp_path):
    exp = _experiment("finer", GPT2_CONDITIONS)
    run_all(parse_config(base_config(gpt2, data, [exp])), tmp_path, progress=False, report=False)
    _check_run(gpt2, tmp_path, dict(exp, data=data), GPT2_EXPECTED)


# ---- controls --------------------------------------------------------------------------------
HEAD_META = {"grain": "head", "layer": 3, "head": 1, "components": "O"}
CONTROLLED = [
    "PRE",
    dict(
        _graft("O h1 L3", "LT", [3], "O", heads=[1]),
        controls={"random": 2, "seed": 5, "complement": True},
        meta=HEAD_META,
    ),
    dict(
        _graft("O+FFN L3 r2", "LT", [3], "O+FFN", shape={"rank": 2}),
        controls={"random": 2, "seed": 1, "complement": True},
    ),
    dict(
        _graft("FE+LT x0.5", "FE+LT", "all", "all", shape={"scale": 0.5}),
        controls={"random": 2, "seed": 3, "vary": "positions", "complement": True},
    ),
    dict(_graft("FFN n", "LT", [2], "FFN", neurons=[1, 2, 3]), controls={"random": 1}),
]


def _plan(models, data, conditions, **top):
    from weightgraft.experiments.execute import Resources
    from weightgraft.experiments.plan import build_plan

    cfg = parse_config({**base_config(models, data, [_experiment("ctl", conditions)]), **top})
    return build_plan(cfg, Resources(cfg)).experiments[0]


def test_controls_expand_to_the_engines_draws(llama, data):
    """Names, order and meta as the contract says; the draws are engine.controls.random_like's on
    the loaded model; two plans are the same."""
    from weightgraft.engine.controls import random_like

    plan = _plan(llama, data, CONTROLLED)
    again = _plan(llama, data, CONTROLLED)
    assert [c.to_json() for c in plan.conditions] == [c.to_json() for c in again.conditions]
    names = [c.name for c in plan.conditions]
    assert names[1:5] == ["O h1 L3", "O h1 L3 [random 1]", "O h1 L3 [random 2]", "O h1 L3 [complement]"]
    assert names[-2:] == ["FFN n", "FFN n [random 1]"]
    by_name = {c.name: c for c in plan.conditions}
    assert by_name["O h1 L3 [random 2]"].meta == dict(HEAD_META, control="random", of="O h1 L3", draw=2)
    assert by_name["O h1 L3 [complement]"].meta == dict(HEAD_META, control="complement", of="O h1 L3")
    grafter = Grafter(*(AutoModelForCausalLM.from_pretrained(llama[k]) for k in ("pre", "sft")))
    heads = random_like(Graft("last", [3], "o", heads=[1]), grafter, 2, seed=5)
    assert [by_name[f"O h1 L3 [random {i}]"].grafts[0].heads for i in (1, 2)] == [g.heads for g in heads]
    layers = random_like(Graft("last", [3], ["o", "gate", "up", "down"]), grafter, 2, seed=1, vary="layers")
    assert [by_name[f"O+FFN L3 r2 [random {i}]"].grafts[0].layers for i in (1, 2)] == [g.layers for g in layers]
    assert all(by_name[f"O+FFN L3 r2 [random {i}]"].grafts[0].shape.rank == 2 for i in (1, 2))
    neurons = random_like(Graft("last", [2], ["gate", "up", "down"], neurons=[1, 2, 3]), grafter, 1, seed=0)
    assert by_name["FFN n [random 1]"].grafts[0].neurons == neurons[0].neurons
    assert by_name["O h1 L3 [complement]"].grafts[0].heads == [0, 2, 3]
    assert by_name["O+FFN L3 r2 [complement]"].grafts[0].layers == [0, 1, 2]


@torch.no_grad()
def test_control_rows_equal_their_grafts(llama, data, tmp_path):
    """The complement of one head is every other head (engine and reference); random positions
    are as many as FE+LT's, from the row's other positions, the same in every plan, and score as
    a direct engine call with those positions."""
    exp = _experiment("ctl", CONTROLLED)
    run_all(parse_config(base_config(llama, data, [exp])), tmp_path, progress=False, report=False)
    _check_run(
        llama, tmp_path, dict(exp, data=data), {"O h1 L3 [complement]": ("LT", [3], ["o"], [0, 2, 3], None, None)}
    )
    plan = _plan(llama, data, CONTROLLED)
    tok = AutoTokenizer.from_pretrained(llama["pre"])
    pre, sft = (AutoModelForCausalLM.from_pretrained(llama[k]).eval() for k in ("pre", "sft"))
    grafter = Grafter(pre, ShapedDonor(sft, scale=0.5))
    prompts = {p.id: p for p in load_eval_prompts(data)}
    for row in _rows(tmp_path, "ctl", "FE+LT x0.5 [random 1]"):
        enc = encode_prompt(tok, prompts[row["example_id"]])
        n, target = len(enc.input_ids), enc.target_ids
        ids = enc.input_ids + target[:-1]
        original = _mask(enc, "FE+LT", n)
        masks = [
            plan.condition(f"FE+LT x0.5 [random {i}]").row_masks(enc.positions, n, len(ids), row["example_id"])[0][0]
            for i in (1, 2)
        ]
        assert (
            masks[0]
            == plan.condition("FE+LT x0.5 [random 1]").row_masks(enc.positions, n, len(ids), row["example_id"])[0][0]
        )
        assert masks[0] != masks[1] and all(sum(m[:n]) == sum(original) for m in masks)
        assert not any(a and b for m in masks for a, b in zip(m[:n], original))
        logits = grafter.logits(torch.tensor([ids]), Graft(masks[0], "all", "all"))[0]
        rank, prob, total = _scores(logits, n, target)
        assert row["rank"] == rank and row["prob"] == pytest.approx(prob, **PROB_TOL)
        complement = [not m for m in original[:n]] + [False] * (len(ids) - n)
        logits = grafter.logits(torch.tensor([ids]), Graft(complement, "all", "all"))[0]
        other = next(
            r for r in _rows(tmp_path, "ctl", "FE+LT x0.5 [complement]") if r["example_id"] == row["example_id"]
        )
        assert other["rank"] == _scores(logits, n, target)[0]
        assert other["prob"] == pytest.approx(_scores(logits, n, target)[1], **PROB_TOL)


# ---- a rank curve: one pass per batch, resumed bit for bit ----------------------------------
RANK_CURVE = ["PRE", "SFT"] + [
    _graft(f"O+FFN rank {k}", "LT", "authors_fourth_quarter", "O+FFN", **({"shape": {"rank": k}} if k else {}))
    for k in (1, 2, 4, 8, 0)
]


class Interrupt(Exception):
    pass


def test_rank_curve_resumes_bit_identically(llama, data, tmp_path, monkeypatch):
    from weightgraft.experiments import result_files

    cfg = parse_config(base_config(llama, data, [_experiment("rank", RANK_CURVE)]))
    plan = _plan(llama, data, RANK_CURVE)
    assert len(plan.chunks) == 1  # every point of the curve in one Grafter, one pass per batch
    whole = tmp_path / "whole"
    run_all(cfg, whole, progress=False, report=False)
    real_write, seen = result_files.write_condition, []

    def write_then_stop(path, rows, fingerprint):
        real_write(path, rows, fingerprint)
        seen.append(rows[0].condition)
        if len(seen) == 3:
            raise Interrupt

    resumed = tmp_path / "resumed"
    monkeypatch.setattr(result_files, "write_condition", write_then_stop)
    with pytest.raises(Interrupt):
        run_all(cfg, resumed, progress=False, report=False)
    monkeypatch.undo()
    second = run_all(cfg, resumed, progress=False, report=False)
    assert sorted(second.reused) == sorted(f"rank/{c}" for c in seen) and len(second.computed) == 4
    for cond in plan.conditions:
        assert _rows(resumed, "rank", cond.name) == _rows(whole, "rank", cond.name), cond.name
    assert (resumed / "summary.csv").read_bytes() == (whole / "summary.csv").read_bytes()
    probs = [[r["prob"] for r in _rows(whole, "rank", f"O+FFN rank {k}")] for k in (1, 2, 4, 8)]
    assert len({tuple(p) for p in probs}) == 4  # each rank a different graft


# ---- bad input: one line each ------------------------------------------------------------------
BAD = [
    (_graft("x", "LT", [3], "O", heads=[4]), "4 query heads (q, o: 0..3) and 2 key-value heads (k, v: 0..1)"),
    (_graft("x", "LT", [3], "K", heads=[2]), "head 2 is out of range for 'k'"),
    (_graft("x", "LT", [3], "FFN", neurons=[64]), "FFN has 64 neurons (0..63)"),
    (_graft("x", "LT", [3], "FFN", heads=[1]), "have no heads"),
    (_graft("x", "LT", [3], "O", shape={"rank": 40}), "rank 40 is above the rank of o's weight (a 32 x 32 matrix"),
    (_graft("x", "LT", [3], "O", shape={"scale": float("inf")}), "scale must be a finite number"),
    (_graft("x", "LT", [3], "O", shape={"scale": float("nan")}), "scale must be a finite number"),
    (dict(_graft("x", "LT", [3], "O"), controls={"random": 1, "vary": "tokens"}), "vary must name one of positions"),
    (dict(_graft("x", "LT", [3], "O", heads=[1]), controls={"random": 4}), "only 3 random draws of heads differ"),
    (dict(_graft("x", "LT", "all", "O"), controls={"complement": True}), "its complement in layers is empty"),
]


@pytest.mark.parametrize("condition,words", BAD, ids=[b[1][:30] for b in BAD])
def test_bad_finer_input_is_one_line(llama, data, tmp_path, condition, words):
    from weightgraft.errors import UserError

    with pytest.raises(UserError) as err:
        _plan(llama, data, ["PRE", condition])
    assert words in str(err.value) and "\n" not in str(err.value)


# ---- localize at head grain from a run config --------------------------------------------------
def test_localize_grain_reaches_the_search(llama, data, tmp_path):
    import json

    from exp_fixtures import gain_donor

    models = dict(llama, gain=gain_donor(llama["pre"], tmp_path / "gain"))
    loc = {"localize": "heads", "dataset": "relation", "donor": "gain", "max_examples": 3, "steps": 2, "grain": "head"}
    cfg = parse_config(
        base_config(models, data, [_experiment("base", ["PRE"]), loc, dict(loc, localize="whole", grain="component")])
    )
    run_all(cfg, tmp_path / "run", progress=False, report=False)
    tmp_path = tmp_path / "run"
    ranked = {
        n: set(pq.read_table(tmp_path / "localize" / n / "ranking.parquet").column("component").to_pylist())
        for n in ("heads", "whole")
    }
    assert {"o#0", "o#3", "k#1", "q#2"} <= ranked["heads"] and "o" not in ranked["heads"]
    assert "o" in ranked["whole"] and not any("#" in c for c in ranked["whole"])
    ledger = json.loads((tmp_path / "localize" / "whole" / "provenance.json").read_text())
    assert "grain" not in ledger["steps"]["localize"]["inputs"]["spec"]


# ---- the schema: existing keys unchanged, new ones only when set ---------------------------------
def test_finer_fields_join_the_key_only_when_set():
    from weightgraft.experiments.conditions import ConditionSpec, ShapeSpec, resolve_condition
    from weightgraft.experiments.plan.types import condition_from_json

    def key(**graft):
        spec = ConditionSpec(name="c", grafts=[dict(positions="LT", layers=[1], components="O", **graft)])
        return resolve_condition(spec, recipient="pre", donor="sft")

    plain = key()
    assert list(plain.to_json()["grafts"][0]) == ["positions", "layers", "components", "donor"]
    assert key(shape={"scale": 1.0}).key() == plain.key()  # scale 1, whole change: the donor itself
    shaped = key(heads=[3, 1, 3], shape={"scale": -0.5, "rank": 4})
    assert shaped.to_json()["grafts"][0]["heads"] == [1, 3]
    assert shaped.grafts[0].donor_key == "sft~scale=-0.5,rank=4"
    assert len({plain.key(), shaped.key(), key(heads=[1, 3]).key(), key(shape={"rank": 4}).key()}) == 4
    assert condition_from_json(shaped.to_json()).key() == shaped.key()
    for shape in (ShapeSpec(rank=4), ShapeSpec(scale=2.0, top=0.25), ShapeSpec(top=40), ShapeSpec(top=1.0)):
        assert ShapeSpec.from_key(shape.key()) == shape
