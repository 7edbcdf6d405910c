"""The runner against independent computations, resuming, and not-applicable bookkeeping.

Everything goes through the real engine and data layer; the expected numbers come from plain
Hugging Face forward passes (and `generate`), the row-by-row reference grafter of exp_fixtures,
and a one-example-at-a-time activation patch written here.
"""

from __future__ import annotations

import csv

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from exp_fixtures import ReferenceGrafter, RefGraft, build_models
from tiny_world import base_config, write_dataset
from weightgraft.data.encode import encode_prompt
from weightgraft.data.io import load_eval_prompts
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.run_folder import slug
from weightgraft.pipelines import run_all

PATCH = {
    "name": "patch LT+FE late",
    "method": "activations",
    "grafts": [{"positions": "FE+LT", "layers": "last_half", "components": "BLOCKS"}],
}
TASK_ALONE = {"name": "task alone", "recipient": "task", "grafts": []}
# float32 rounding: the runner scores padded batches with prefix sharing, the checks below one
# unpadded example at a time (measured: <= 3e-7 relative on prob, <= 5e-7 nats on logprob);
# abs covers probabilities near 0.
PROB_TOL = dict(rel=1e-4, abs=1e-6)
LOGPROB_TOL = dict(rel=1e-4, abs=1e-5)
# summary.csv writes values with 6 decimals (reporting.summary._fmt): up to 5e-7 of rounding
CSV_ROUNDING = 1e-6
CUSTOM = {
    "name": "direct",
    "dataset": "relation",
    "recipient": "pre",
    "donor": "sft",
    "conditions": ["PRE", "SFT", "FE+LT", "M", PATCH, TASK_ALONE],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    return build_models(root / "models"), write_dataset(root / "data")


@pytest.fixture(scope="module")
def direct_run(world, tmp_path_factory):
    models, data = world
    out = tmp_path_factory.mktemp("run")
    cfg = parse_config(base_config(models, data, [CUSTOM]))
    result = run_all(cfg, out, progress=False, report=False)
    return out, result


def _rows(out, exp, cond):
    return pq.read_table(out / "examples" / exp / f"{slug(cond)}.parquet").to_pylist()


def _scores(logits, n, target):
    """rank/prob/logprob from logits of prompt+target[:-1], computed the plain way."""
    logp = torch.log_softmax(logits.float(), -1)
    first = logits[n - 1]
    rank = 1 + sum(1 for v in first.tolist() if v > first[target[0]].item())
    total = sum(logp[n - 1 + j, t].item() for j, t in enumerate(target))
    return rank, logp[n - 1, target[0]].exp().item(), total


def _patched(recipient, donor, ids, positions, layers):
    """One example: donor block outputs copied into the recipient's run at positions/layers."""
    saved = {}
    hooks = [
        donor.model.layers[i].register_forward_hook(
            lambda m, a, o, i=i: saved.__setitem__(i, (o if torch.is_tensor(o) else o[0]).clone())
        )
        for i in layers
    ]
    donor(ids[None])
    for h in hooks:
        h.remove()

    def patch(i):
        def hook(m, a, o):
            h = (o if torch.is_tensor(o) else o[0]).clone()
            h[:, positions] = saved[i][:, positions]
            return h if torch.is_tensor(o) else (h, *o[1:])

        return hook

    hooks = [recipient.model.layers[i].register_forward_hook(patch(i)) for i in layers]
    try:
        return recipient(ids[None]).logits[0]
    finally:
        for h in hooks:
            h.remove()


@torch.no_grad()
def test_metrics_equal_direct_computation(world, direct_run):
    models, data = world
    out, _ = direct_run
    tok = AutoTokenizer.from_pretrained(models["pre"])
    pre = AutoModelForCausalLM.from_pretrained(models["pre"]).eval()
    sft = AutoModelForCausalLM.from_pretrained(models["sft"]).eval()
    task = AutoModelForCausalLM.from_pretrained(models["task"]).eval()
    ref = ReferenceGrafter(pre, sft)
    prompts = {p.id: p for p in load_eval_prompts(data)}
    checked = 0
    for cond in ["PRE", "SFT", "FE+LT", PATCH["name"], TASK_ALONE["name"]]:
        for row in _rows(out, "direct", cond):
            enc = encode_prompt(tok, prompts[row["example_id"]])
            n, target = len(enc.input_ids), enc.target_ids
            ids = torch.tensor(enc.input_ids + target[:-1])
            if cond == "PRE":
                logits = pre(ids[None]).logits[0]
                greedy = pre.generate(ids[None, :n], max_new_tokens=len(target), do_sample=False, pad_token_id=0)[
                    0, n:
                ].tolist()
                assert row["exact_match"] == (greedy == target)
            elif cond == "SFT":
                logits = sft(ids[None]).logits[0]
                greedy = sft.generate(ids[None, :n], max_new_tokens=len(target), do_sample=False, pad_token_id=0)[
                    0, n:
                ].tolist()
                assert row["exact_match"] == (greedy == target)
            elif cond == "FE+LT":  # every weight but the final norm and unembedding
                sel = set(enc.positions["first_entity"]) | {n - 1}
                mask = [i in sel or i >= n for i in range(len(ids))]
                weights = ["embed", "q", "k", "v", "o", "gate", "up", "down", "ln1", "ln2"]
                logits = ref.logits(ids[None], row_grafts=[[RefGraft(mask, "all", weights)]])[0]
                assert row["exact_match"] == all(logits[n - 1 + j].argmax().item() == t for j, t in enumerate(target))
            elif cond == TASK_ALONE["name"]:  # a condition with its own recipient
                logits = task(ids[None]).logits[0]
            else:
                sel = sorted(set(enc.positions["first_entity"]) | set(range(n - 1, len(ids))))
                logits = _patched(pre, sft, ids, sel, [2, 3])
            rank, prob, total = _scores(logits, n, target)
            assert row["applicable"] and row["rank"] == rank, (cond, row["example_id"])
            assert row["prob"] == pytest.approx(prob, **PROB_TOL)
            assert row["target_logprob"] == pytest.approx(total, **LOGPROB_TOL)
            checked += 1
    assert checked == 5 * len(prompts)
    # the summary's top-5 is the mean of the per-example indicator, computed independently
    with open(out / "summary.csv") as handle:
        summary = list(csv.DictReader(handle))
    ranks = [r["rank"] for r in _rows(out, "direct", "SFT")]
    top5 = next(
        r
        for r in summary
        if (r["condition"], r["template"], r["fact_kind"], r["metric"]) == ("SFT", "ALL", "ALL", "top5")
    )
    assert float(top5["value"]) == pytest.approx(sum(r <= 5 for r in ranks) / len(ranks), abs=CSV_ROUNDING)
    assert int(top5["n"]) == len(ranks)
    assert float(top5["ci_low"]) <= float(top5["value"]) <= float(top5["ci_high"])


@torch.no_grad()
def test_hybrid_two_donor_rows_equal_the_reference(world, tmp_path):
    """The hybrid draws FE and LT q,k,v,gate from `task` and LT o,up,down from `sft` in one
    pass; every row equals the row-by-row two-donor reference (4 layers: q = 1, the authors'
    third and fourth quarters are layers 2..3)."""
    models, data = world
    cfg = parse_config(base_config(models, data, [{"preset": "hybrid", "max_examples": 6}]))
    run_all(cfg, tmp_path, progress=False, report=False)
    tok = AutoTokenizer.from_pretrained(models["pre"])
    loaded = {k: AutoModelForCausalLM.from_pretrained(models[k]).eval() for k in ("pre", "sft", "task")}
    ref = ReferenceGrafter(loaded["pre"], {"sft": loaded["sft"], "task": loaded["task"]})
    prompts = {p.id: p for p in load_eval_prompts(data)}
    for cond, fe in (("HYBRID FE_attn", ["q", "k", "v", "o"]), ("HYBRID no_FE", None)):
        rows = _rows(tmp_path, "hybrid", cond)
        assert len(rows) == 6
        for row in rows:
            enc = encode_prompt(tok, prompts[row["example_id"]])
            n, target = len(enc.input_ids), enc.target_ids
            ids = torch.tensor(enc.input_ids + target[:-1])
            lt = [i >= n - 1 for i in range(len(ids))]
            grafts = [
                RefGraft(lt, [2, 3], ["q", "k", "v", "gate"], "task"),
                RefGraft(lt, [2, 3], ["o", "up", "down"], "sft"),
            ]
            if fe:
                sel = set(enc.positions["first_entity"])
                grafts.append(RefGraft([i in sel for i in range(len(ids))], "all", fe, "task"))
            logits = ref.logits(ids[None], row_grafts=[grafts])[0]
            rank, prob, total = _scores(logits, n, target)
            assert row["rank"] == rank, (cond, row["example_id"])
            assert row["prob"] == pytest.approx(prob, **PROB_TOL)
            assert row["target_logprob"] == pytest.approx(total, **LOGPROB_TOL)


def test_summary_reports_each_fact_kind(direct_run):
    """Per fact kind: the mean of the per-example indicator over that kind's examples only."""
    out, _ = direct_run
    rows = _rows(out, "direct", "SFT")
    with open(out / "summary.csv") as handle:
        summary = [
            r for r in csv.DictReader(handle) if (r["condition"], r["template"], r["metric"]) == ("SFT", "ALL", "top5")
        ]
    by_kind = {r["fact_kind"]: r for r in summary}
    assert set(by_kind) == {"ALL", "fake_fake", "fake_real", "real_shuffled"}
    for kind in ("fake_fake", "fake_real", "real_shuffled"):
        mine = [r["rank"] <= 5 for r in rows if r["fact_kind"] == kind]
        assert int(by_kind[kind]["n"]) == len(mine) == (6 if kind == "fake_fake" else 3)
        assert float(by_kind[kind]["value"]) == pytest.approx(sum(mine) / len(mine), abs=CSV_ROUNDING)


def test_not_applicable_is_reported_never_dropped(direct_run, world):
    out, _ = direct_run
    rows = _rows(out, "direct", "M")
    assert len(rows) == len(load_eval_prompts(world[1]))
    na = [r for r in rows if not r["applicable"]]
    assert {r["template"] for r in na} == {"paper_1", "paper_2"}
    assert all(r["rank"] is None and "M" in r["note"] for r in na)
    with open(out / "summary.csv") as handle:
        summary = [
            r
            for r in csv.DictReader(handle)
            if r["condition"] == "M" and r["metric"] == "top1" and r["fact_kind"] == "ALL"
        ]
    by_template = {r["template"]: r for r in summary}
    assert by_template["paper_1"]["n"] == "0" and by_template["paper_1"]["value"] == ""
    assert by_template["paper_3"]["n"] == "4" and by_template["ALL"]["n"] == "4"


class Interrupt(Exception):
    pass


def test_interrupted_run_resumes_to_the_same_summary(world, tmp_path, monkeypatch):
    models, data = world
    experiments = [
        {"preset": "position_grafting"},
        {"name": "patching", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", PATCH]},
    ]
    cfg = parse_config({**base_config(models, data, experiments), "conditions_per_chunk": 3})
    whole = tmp_path / "whole"
    run_all(cfg, whole, progress=False, report=False)

    resumed = tmp_path / "resumed"
    seen = []

    def stop_after_five(name):
        seen.append(name)
        if len(seen) == 5:
            raise Interrupt

    from weightgraft.experiments import result_files

    real_write = result_files.write_condition

    def write_then_maybe_stop(path, rows, fingerprint):
        real_write(path, rows, fingerprint)
        stop_after_five(f"{rows[0].experiment}/{rows[0].condition}")

    monkeypatch.setattr(result_files, "write_condition", write_then_maybe_stop)
    with pytest.raises(Interrupt):
        run_all(cfg, resumed, progress=False, report=False)
    monkeypatch.undo()
    assert not (resumed / "summary.csv").exists()
    second = run_all(cfg, resumed, progress=False, report=False)
    assert len(second.reused) == 5 and set(second.reused) == set(seen)
    assert len(second.computed) == 11 + 2 - 5
    assert (resumed / "summary.csv").read_text() == (whole / "summary.csv").read_text()
    assert not list(resumed.rglob("*.tmp"))
    third = run_all(cfg, resumed, progress=False, report=False)
    assert third.computed == [] and len(third.reused) == 13


def test_changed_condition_is_recomputed(world, tmp_path):
    models, data = world
    exp = {
        "name": "e",
        "dataset": "relation",
        "recipient": "pre",
        "donor": "sft",
        "conditions": ["PRE", {"name": "x", "grafts": [{"positions": "LT"}]}],
    }
    run_all(parse_config(base_config(models, data, [exp])), tmp_path, progress=False, report=False)
    exp["conditions"][1]["grafts"][0]["positions"] = "FE"
    again = run_all(parse_config(base_config(models, data, [exp])), tmp_path, progress=False, report=False)
    assert again.computed == ["e/x"] and again.reused == ["e/PRE"]


def test_model_overrides_replace_config_entries(world, tmp_path):
    """`--recipient/--donor/--task-model` land on the pre/sft/task keys; paths resolve from the
    config's folder, hub ids stay as given."""
    import yaml

    from weightgraft.experiments.config import load_config

    models, data = world
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(base_config({"pre": "gpt2", "sft": "./relation"}, data, [{"preset": "position_grafting"}]))
    )
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.models == {"pre": "gpt2", "sft": str((tmp_path / "relation").resolve())}
    cfg = load_config(tmp_path / "c.yaml", models={"sft": models["task"]}, device="cuda", dtype="bfloat16")
    assert cfg.models["sft"] == models["task"] and cfg.device == "cuda"
    assert cfg.dtype == "bfloat16"


def test_config_differences_are_refused_unless_the_run_config_allows_them(world, tmp_path):
    """A donor with another rope_theta changes the computation: the run refuses it, naming the
    field, and runs when `allow_config_differences` lists it (and the graft then has an effect)."""
    import json
    import shutil

    from weightgraft.errors import UserError

    models, data = world
    other = tmp_path / "other_rope"
    shutil.copytree(models["sft"], other)
    config = json.loads((other / "config.json").read_text())
    theta = config.get("rope_theta") or config["rope_parameters"]["rope_theta"]
    if "rope_parameters" in config:
        config["rope_parameters"]["rope_theta"] = theta * 2
    else:
        config["rope_theta"] = theta * 2
    (other / "config.json").write_text(json.dumps(config))
    exp = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", "FE+LT"]}
    body = base_config({**models, "sft": str(other)}, data, [exp])
    with pytest.raises(UserError, match=r"models.pre and models.sft cannot be grafted.*rope_theta"):
        run_all(parse_config(body), tmp_path / "refused", progress=False, report=False)
    result = run_all(
        parse_config(dict(body, allow_config_differences=["rope_theta"])),
        tmp_path / "ran",
        progress=False,
        report=False,
    )
    assert sorted(result.computed) == ["e/FE+LT", "e/PRE"]
    pre, grafted = (_rows(tmp_path / "ran", "e", c) for c in ("PRE", "FE+LT"))
    assert any(abs(a["prob"] - b["prob"]) > 1e-4 for a, b in zip(pre, grafted))
