"""A run on names whose first token is whitespace alone (issue 31, item 4): with the built-in
byte-level tokenizer, " Émile" is `' '` then `'\\xc3'`, `'\\x89'`. The runner scores rank and prob on
the name's first character's byte tokens (issue 41, item 3: the scored unit) and the prediction at
its first, the space teacher-forced before them (checked against a plain forward pass),
`target_logprob` still covers the whole target, the records' note, the state and the report say
which tokens were scored, and training's top-k evaluation scores the same unit; localize's examples
and the explorer score its first token."""

from __future__ import annotations

import inspect
import json
from functools import lru_cache

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from tiny_world import base_config
from weightgraft.data.encode import encode_prompt
from weightgraft.data.schema import CharSpan, EvalPrompt
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.run_folder import slug
from weightgraft.pipelines import merge_run, run_all
from weightgraft.training.evaluate import topk_hits

NAMES = ["Émile Zola", "李小龍", "🎬 Star", "Αλέξης Τσίπρας", "Иван Петров", "Rosa Park"]
TEMPLATES = {"a": "{a} stars in a movie alongside", "b": "Q: Who stars in a movie with {a}? A: An actor named"}
EXPERIMENT = {
    "name": "names",
    "dataset": "relation",
    "recipient": "pre",
    "donor": "sft",
    "conditions": ["PRE", "SFT", "FE+LT"],
}


@lru_cache(maxsize=1)
def _tokenizer():
    from weightgraft.training import builtin, builtin_specs

    spec = builtin_specs.SPECS["default"]
    return builtin.pretraining_tokenizer(spec, builtin.build_world(spec))


def _prompts() -> list[EvalPrompt]:
    out = []
    for i, name in enumerate(NAMES):
        first = "Ada Brook" if i % 2 else "Gus Hale"
        for tid, template in TEMPLATES.items():
            text = template.format(a=first)
            last = text.rsplit(" ", 1)[-1]
            out.append(
                EvalPrompt(
                    id=f"{i}-{tid}",
                    fact_id=str(i),
                    template_id=tid,
                    text=text,
                    target=" " + name,
                    spans={
                        "first_entity": CharSpan(start=text.index(first), end=text.index(first) + len(first)),
                        "last_token": CharSpan(start=len(text) - len(last), end=len(text)),
                    },
                    fact_kind="user",
                )
            )
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    tokenizer = _tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=False,
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=None,
    )
    torch.manual_seed(0)
    models = {}
    for name in ("pre", "sft"):
        model = LlamaForCausalLM(config).eval()
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
        models[name] = str(root / name)
    data = root / "data"
    data.mkdir()
    (data / "eval.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in _prompts()))
    (data / "manifest.json").write_text(json.dumps({"name": "names", "seed": 0}))
    out = root / "run"
    run_all(parse_config(base_config(models, str(data), [EXPERIMENT])), out, progress=False, report=True)
    return models, out


@torch.no_grad()
def test_rank_prob_and_prediction_score_the_first_content_token(world):
    models, out = world
    tokenizer = _tokenizer()
    pre = AutoModelForCausalLM.from_pretrained(models["pre"]).eval()
    prompts = {p.id: p for p in _prompts()}
    rows = pq.read_table(out / "examples" / "names" / f"{slug('PRE')}.parquet").to_pylist()
    assert len(rows) == len(prompts)
    for row in rows:
        enc = encode_prompt(tokenizer, prompts[row["example_id"]])
        ascii_name = prompts[row["example_id"]].target.strip().isascii()
        assert enc.scored == (0 if ascii_name else 1)
        n, target = len(enc.input_ids), enc.target_ids
        logits = pre(torch.tensor([enc.input_ids + target[:-1]])).logits[0].float()
        step = logits[n - 1 + enc.scored]  # after the prompt and the whitespace token
        scored = target[enc.scored]
        assert tokenizer.decode([scored]).strip(), "the scored token is whitespace alone"
        # the scored unit: the first character's byte tokens (one for an ASCII name), teacher-forced
        unit = 1 if ascii_name else len(prompts[row["example_id"]].target.strip()[0].encode())
        assert enc.unit == unit
        steps = [logits[n - 1 + enc.scored + j] for j in range(unit)]
        tokens = target[enc.scored : enc.scored + unit]
        assert row["rank"] == max(1 + int((s > s[t]).sum()) for s, t in zip(steps, tokens))
        prob = float(torch.tensor([torch.softmax(s, -1)[t].item() for s, t in zip(steps, tokens)]).prod())
        assert row["prob"] == pytest.approx(prob, rel=1e-4, abs=1e-9)
        assert row["predicted"] == tokenizer.decode([int(step.argmax())])
        logp = torch.log_softmax(logits, -1)
        whole = sum(logp[n - 1 + j, t].item() for j, t in enumerate(target))
        assert row["target_logprob"] == pytest.approx(whole, rel=1e-4, abs=1e-5)
        if ascii_name:
            assert row["note"] == ""
        else:
            assert row["note"].startswith(f"scored unit: target tokens 2-{1 + unit} of ")
            assert "whitespace-only ' '" in row["note"]


def test_the_state_and_the_report_say_which_token_is_scored(world):
    _, out = world
    state = json.loads((out / "state" / "names.json").read_text())
    split = state["scored_after_whitespace"]
    assert sorted(split) == sorted(p.id for p in _prompts() if not p.target.strip().isascii())
    report = (out / "report.md").read_text()
    assert "Scored token: 10 of 12 prompts have a target whose first token is whitespace alone" in report
    # the scored unit of each: the first character's UTF-8 bytes, one token each
    units = {p.id: len(p.target.strip()[0].encode()) for p in _prompts() if not p.target.strip().isascii()}
    assert state["scored_units"] == units
    assert (
        "Scored unit: 10 of 12 prompts have a target whose first character the tokenizer splits over 2 to 4 byte tokens"
        in report
    )


def test_two_shards_merge_to_the_whole_runs_units_and_scores(world, tmp_path):
    models, out = world
    # small batches, so that each shard scores some of the split names
    config = parse_config(dict(base_config(models, str(out.parent / "data"), [EXPERIMENT]), max_batch_tokens=150))
    whole_out, sharded = tmp_path / "whole", tmp_path / "sharded"
    run_all(config, whole_out, progress=False, report=False)
    for shard in range(2):
        run_all(config, sharded, progress=False, report=False, shard=(shard, 2))
        part = json.loads((sharded / "state" / f"names.shard-{shard}-of-2.json").read_text())
        assert part.get("scored_units"), f"shard {shard} has no split names"
    merge_run(sharded, report=False)
    whole, merged = (json.loads((o / "state" / "names.json").read_text()) for o in (whole_out, sharded))
    assert merged["scored_units"] == whole["scored_units"] and len(whole["scored_units"]) == 10
    assert merged["scored_after_whitespace"] == whole["scored_after_whitespace"]
    name = f"{slug('PRE')}.parquet"
    rows = [pq.read_table(o / "examples" / "names" / name).to_pylist() for o in (whole_out, sharded)]
    assert rows[1] == rows[0]


@torch.no_grad()
def test_training_evaluation_scores_the_same_token(world):
    models, _ = world
    tokenizer = _tokenizer()
    pre = AutoModelForCausalLM.from_pretrained(models["pre"]).eval()
    prompts = _prompts()
    hits = topk_hits(pre, tokenizer, prompts, k=5)
    for prompt, hit in zip(prompts, hits):
        enc = encode_prompt(tokenizer, prompt)
        # every token of the scored unit in the top 5 at its step, the earlier ones teacher-forced
        logits = pre(torch.tensor([enc.input_ids + enc.target_ids[: enc.scored + enc.unit - 1]])).logits[0]
        steps = logits[len(enc.input_ids) + enc.scored - 1 :]
        assert len(steps) == enc.unit
        assert hit == all(t in s.topk(5).indices.tolist() for s, t in zip(steps, enc.unit_ids))
    assert "logits_to_keep" in inspect.signature(pre.forward).parameters  # the narrowed unembedding ran

    class WholeLogitsOnly(torch.nn.Module):  # a model that cannot be told which columns to unembed
        def __init__(self, net):
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask):
            return self.net(input_ids=input_ids, attention_mask=attention_mask)

    assert topk_hits(WholeLogitsOnly(pre), tokenizer, prompts, k=5) == hits


def test_localize_examples_end_on_the_whitespace_token_in_the_last_tokens_role():
    from weightgraft.attribution.role_examples import encode_role_examples

    tokenizer = _tokenizer()
    for prompt, example in zip(_prompts(), encode_role_examples(tokenizer, _prompts())):
        enc = encode_prompt(tokenizer, prompt)
        assert example.input_ids == enc.input_ids + enc.target_ids[: enc.scored]
        assert example.target_id == enc.target_ids[enc.scored] and example.target.strip()
        n = len(enc.input_ids)
        assert example.roles["LT"] == list(range(n - 1, n + enc.scored))


@torch.no_grad()
def test_explore_scores_the_first_content_token(world):
    """The explorer's grid gets the whitespace token after the prompt, in the last token's role
    (as the runner's rows carry the last token's grafts to it), and its target is the content token."""
    from weightgraft.explore.open_session import open_session

    models, out = world
    session = open_session(models["pre"], {"sft": models["sft"]}, out.parent / "data")
    tokenizer = _tokenizer()
    prompt = _prompts()[0]  # " Émile Zola"
    encoded = session.encode(prompt.text, prompt.target, prompt.id)
    enc = encode_prompt(tokenizer, prompt)
    assert enc.scored == 1
    assert encoded.input_ids == enc.input_ids + enc.target_ids[:1]
    assert encoded.tokens[-1] == " " and encoded.roles[-2:] == ["LT", "LT"]
    assert encoded.target_id == enc.target_ids[1]
    assert session.prompt_view(encoded)["target_token"].strip()
