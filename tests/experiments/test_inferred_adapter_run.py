"""A run on a model whose architecture weightgraft has no adapter for: the plan infers it from the
config, the engine from the loaded model, run.json records it, and the rows are the engine's."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from reference_grafter import GraftSpec, reference_logits
from tiny_world import base_config, build_tokenizer, write_dataset
from toy_decoder import ToyConfig, ToyForCausalLM
from weightgraft.data.encode import encode_prompt
from weightgraft.data.io import load_eval_prompts
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.run_folder import slug
from weightgraft.pipelines import run_all

PROB_TOL = dict(rel=1e-4, abs=1e-6)
# The clean FE+LT grafts every weight but the final norm and the unembedding (docs/methodology.md).
WEIGHTS = ["embed", "pos_embed", "q", "k", "v", "o", "gate", "up", "down", "ln1", "ln2"]


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    tokenizer = build_tokenizer()
    paths = {}
    for seed, name in enumerate(["pre", "sft"]):
        torch.manual_seed(seed)
        model = ToyForCausalLM(ToyConfig(vocab_size=len(tokenizer), max_position_embeddings=64)).eval()
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn_like(param) * 0.1)
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        paths[name] = str(root / name)
    data = write_dataset(root / "data")
    experiment = {
        "name": "toy",
        "dataset": "relation",
        "recipient": "pre",
        "donor": "sft",
        "conditions": ["PRE", "SFT", "FE+LT"],
    }
    out = root / "run"
    run_all(parse_config(base_config(paths, data, [experiment])), out, progress=False, report=True)
    return paths, data, out


def test_run_json_records_the_inferred_adapter(toy_run):
    _, _, out = toy_run
    models = json.loads((out / "run.json").read_text())["models"]
    assert {key: info["adapter"] for key, info in models.items()} == {"pre": "inferred", "sft": "inferred"}
    report = (out / "report.md").read_text()
    assert "| model | path | sha256 | adapter |" in report and report.count("| inferred |") == 2


def test_fe_lt_rows_equal_the_reference_grafter(toy_run):
    """Every FE+LT row's probability of the target: the per-token reference on the toy's own
    hand-written table (tests/support/reference_grafter.py), not weightgraft's inference."""
    paths, data, out = toy_run
    tokenizer = AutoTokenizer.from_pretrained(paths["pre"])
    pre = AutoModelForCausalLM.from_pretrained(paths["pre"]).eval()
    sft = AutoModelForCausalLM.from_pretrained(paths["sft"]).eval()
    prompts = {p.id: p for p in load_eval_prompts(data)}
    rows = pq.read_table(out / "examples" / "toy" / f"{slug('FE+LT')}.parquet").to_pylist()
    assert rows
    for row in rows:
        enc = encode_prompt(tokenizer, prompts[row["example_id"]])
        n = len(enc.input_ids)
        positions = sorted(set(enc.positions["first_entity"]) | {n - 1})
        with torch.no_grad():
            spec = GraftSpec(positions, "all", WEIGHTS)
            logits = reference_logits(pre, sft, torch.tensor(enc.input_ids), spec)
        prob = logits[n - 1].float().softmax(-1)[enc.target_ids[0]].item()
        assert row["prob"] == pytest.approx(prob, **PROB_TOL), row["example_id"]
