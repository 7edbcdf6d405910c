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
from weightgraft.experiments.records import slug
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
