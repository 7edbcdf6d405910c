"""`Grafter.score` (issue 39, item 2) records what a `weightgraft run` records, row for row: the
same scored token (the runner's rule, through `Prompt`), rank, probability, whole-target
log-probability, exact match, prediction and top-k hits, and the same N/A rows, on the built-in
tiny models, for conditions written as run-config strings and as the API's Grafts."""

from __future__ import annotations

import json

import polars as pl
import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tiny_world import base_config
from training_fixtures import tiny_artifacts
from weightgraft import Graft, Grafter, Prompt
from weightgraft.data.schema import EvalPrompt
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.run_folder import slug
from weightgraft.pipelines import run_all

LATE = {
    "name": "O+FFN at LT, last half",
    "grafts": [{"positions": "LT", "layers": "last_half", "components": ["o", "mlp"]}],
}
CONDITIONS = ["PRE", "SFT", "FE+LT", "(FE+LT)^C", "M+LT", LATE]


def _api_conditions(grafter: Grafter) -> dict:
    """The same conditions as the API's Grafts (every weight: the embeddings and every layer,
    not the final norm or unembedding)."""
    every = [c for c in grafter.components if c not in ("ln_final", "lm_head")]
    return {
        "PRE": None,
        "SFT": Graft(),
        "FE+LT": Graft("FE+LT", "all", every),
        "(FE+LT)^C": Graft("(FE+LT)^C", "all", every),
        "M+LT": Graft("M+LT", "all", every),
        LATE["name"]: Graft("LT", "last_half", ["o", "mlp"]),
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    art = tiny_artifacts()
    out = tmp_path_factory.mktemp("api-score") / "run"
    experiment = {"name": "api", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": CONDITIONS}
    experiment["max_examples"] = 24
    models = {"pre": str(art.pretrained), "sft": str(art.relation_model)}
    run_all(parse_config(base_config(models, str(art.relation_data), [experiment])), out, progress=False, report=False)
    return art, out


@torch.no_grad()
def test_score_equals_the_runs_parquet_rows(world):
    art, out = world
    tok = AutoTokenizer.from_pretrained(art.pretrained)
    grafter = Grafter(
        AutoModelForCausalLM.from_pretrained(art.pretrained), AutoModelForCausalLM.from_pretrained(art.relation_model)
    )
    rows = {
        row.id: row
        for row in (
            EvalPrompt.model_validate(json.loads(line))
            for line in (art.relation_data / "eval.jsonl").read_text().splitlines()
        )
    }
    run = {
        name: pq.read_table(out / "examples" / "api" / f"{slug(name)}.parquet").to_pylist()
        for name in _api_conditions(grafter)
    }
    ids = [r["example_id"] for r in run["PRE"]]
    prompts = [Prompt.from_row(tok, rows[i]) for i in ids]
    scores = grafter.score(prompts, grafts=_api_conditions(grafter), batch_size=40)
    assert scores.height == len(ids) * len(run)
    largest, applicable = 0.0, 0
    for name, records in run.items():
        mine = scores.filter(pl.col("condition") == name).sort("prompt").to_dicts()
        for theirs, got in zip(records, mine):
            assert got["example_id"] == theirs["example_id"]
            assert got["applicable"] == theirs["applicable"], (name, theirs["example_id"])
            if not theirs["applicable"]:
                assert got["rank"] is None and "absent" in got["note"] and "absent" in theirs["note"]
                continue
            applicable += 1
            assert got["n_target_tokens"] == theirs["n_target_tokens"]
            assert got["rank"] == theirs["rank"] and got["exact_match"] == theirs["exact_match"], (name, theirs)
            assert got["predicted"] == theirs["predicted"]
            assert got["top5"] == (theirs["rank"] <= 5) and got["top1"] == (theirs["rank"] <= 1)
            for field in ("prob", "target_logprob"):
                assert got[field] == pytest.approx(theirs[field], rel=1e-4, abs=1e-6), (name, field)
                largest = max(largest, abs(got[field] - theirs[field]))
    print(f"score vs run: {applicable} applicable rows, largest difference {largest:.2e}")
    assert applicable >= len(ids) * 4
    assert len({r["rank"] for r in run["SFT"]} | {r["rank"] for r in run["PRE"]}) > 3  # not a constant


@torch.no_grad()
def test_logit_difference_against_a_competitor(world):
    art, _ = world
    tok = AutoTokenizer.from_pretrained(art.pretrained)
    pre = AutoModelForCausalLM.from_pretrained(art.pretrained)
    grafter = Grafter(pre, AutoModelForCausalLM.from_pretrained(art.relation_model))
    prompt = Prompt(tok, "Dominique Guzman stars in a movie alongside", first_entity="Dominique Guzman")
    scores = grafter.score(prompt, " Lonnie Burch", competitors=" Dominique Guzman").to_dicts()[0]
    target, rival = prompt.encode(" Lonnie Burch").scored_id, prompt.encode(" Dominique Guzman").scored_id
    logits = pre(torch.tensor([prompt.input_ids])).logits[0, -1]
    assert scores["logit_diff"] == pytest.approx((logits[target] - logits[rival]).item(), abs=1e-4)
    assert scores["prob"] == pytest.approx(torch.softmax(logits, -1)[target].item(), rel=1e-4)


def test_score_takes_prompts():
    art = tiny_artifacts()
    grafter = Grafter(
        AutoModelForCausalLM.from_pretrained(art.pretrained), AutoModelForCausalLM.from_pretrained(art.relation_model)
    )
    with pytest.raises(TypeError, match=r"score takes prompts with roles \(weightgraft.Prompt"):
        grafter.score(torch.tensor([[1, 2, 3]]), " x")
