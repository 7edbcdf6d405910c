"""The explorer's many-prompt score on names whose first character the tokenizer splits over byte
tokens (CJK, Hangul, Devanagari in the built-in tokenizer): each prompt's top-5 hit for the
recipient, the donor alone and an LT graft equals the runner's scoring of the same prompt
(`Grafter.score`, whose scored unit is the whole first character). The donor is trained to write
half of the names whole and only the first byte token of the other half, so that scoring the
first byte token alone would count those as known."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tokenizer_fixtures import builtin_tokenizer
from weightgraft import Graft, Grafter, Prompt
from weightgraft.data.schema import EvalPrompt
from weightgraft.explore.many import RoleGraft, score_prompts

NAMES = ["李小龍", "山田太郎", "김민수", "राहुल शर्मा", "林志玲", "박지성", "Rosa Park", "Zoe Hart"]
LEADS = ["Gus Hale", "Ada Voss", "Bo Reed", "Cy Lund", "Di Marsh", "Ed Quill", "Flo Kent", "Hal Moss"]


def _model(vocab: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()


def _first_token_hit(logits: torch.Tensor, target: int) -> float:
    return float((logits.topk(5).indices == target).any())


def _teach(model: LlamaForCausalLM, sequences: list[list[int]], steps: int = 150) -> None:
    """A few Adam steps on the sequences (every token a label): the donor learns them."""
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(steps):
        for ids in sequences:
            batch = torch.tensor([ids])
            model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


def test_many_prompts_score_the_whole_first_character_as_the_runner_does():
    tokenizer = builtin_tokenizer()
    prompts = [Prompt(tokenizer, f"{lead} stars in a movie alongside", first_entity=lead) for lead in LEADS]
    codes = [p.encode(" " + n) for p, n in zip(prompts, NAMES)]
    pre, sft = _model(len(tokenizer), 0), _model(len(tokenizer), 0)
    whole = [list(c.scoring_ids) + c.unit_ids for c in codes[::2]]  # every other name: whole
    first = [list(c.scoring_ids) + c.unit_ids[:1] for c in codes[1::2]]  # the rest: the first byte only
    _teach(sft, whole + first)
    grafter = Grafter(pre, donors={"sft": sft})
    ffn_lt = Graft("LT", "all", "all", donor="sft")
    table = grafter.score(
        prompts,
        [" " + n for n in NAMES],
        grafts={"PRE": None, "SFT": Graft("all", "all", "all", donor="sft"), "LT": ffn_lt},
    )
    runner = {(r["condition"], r["prompt"]): float(r["top5"]) for r in table.to_dicts()}
    assert all(r["applicable"] for r in table.to_dicts())
    encoded, first_only = [], []
    for index, (prompt, enc) in enumerate(zip(prompts, codes)):
        row = EvalPrompt(
            id=f"p{index}", fact_id=f"f{index}", template_id="t", text=prompt.text, target=" " + NAMES[index], spans={}
        )
        roles = {"last_token": list(range(len(prompt.input_ids) - 1, len(enc.scoring_ids)))}
        encoded.append((row, list(enc.scoring_ids), roles, enc.unit_ids))
        with torch.no_grad():
            alone = sft(input_ids=torch.tensor([enc.scoring_ids])).logits[0, -1]
        first_only.append(_first_token_hit(alone, enc.scored_id))
    assert sum(c.unit > 1 for c in codes) >= 5, "the built-in tokenizer should split most of these first characters"

    @torch.no_grad()
    def unit_logits(ids: list[int], rows: list, keep: int) -> torch.Tensor:
        return grafter.logits(torch.tensor([ids]).expand(len(rows), -1), row_grafts=rows, logits_to_keep=keep)

    out = score_prompts(unit_logits, encoded, [RoleGraft("LT", ffn_lt)], ["sft"], seed=0)
    columns = {c["name"]: c["top5"] for c in out["columns"]}
    for name, condition in (("recipient", "PRE"), ("sft", "SFT"), ("graft", "LT")):
        expected = sum(runner[(condition, i)] for i in range(len(NAMES))) / len(NAMES)
        assert abs(columns[name] - expected) < 1e-12, (name, columns[name], expected)
    assert 0 < columns["sft"] < 1 and columns["recipient"] < columns["sft"]
    assert columns["sft"] < sum(first_only) / len(NAMES), (
        "the first byte alone would count names the donor cannot write"
    )
