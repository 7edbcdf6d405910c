"""Scores of a scored unit of several tokens (issue 41, item 3), against independent computations.

`score_rows` on random logits: rank is the largest of the unit's tokens' ranks (each at its own
step), prob the product of their probabilities, predicted the first step's argmax; a unit of one
token gives the scores of before, bit for bit. `Grafter.score` on a tiny model with the built-in
tokenizer and SmolLM2's, on names in several scripts: the same scores from a plain forward pass
(the recipient) and from the engine's logits under an explicit graft (FE+LT).
"""

from __future__ import annotations

from dataclasses import asdict

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tokenizer_fixtures import builtin_tokenizer, smollm2_tokenizer
from weightgraft import Graft, Grafter, Prompt
from weightgraft.engine.scoring import TargetScore, score_rows

NAMES = ["李小龍", "山田太郎", "김민수", "Иван Петров", "Αλέξης Τσίπρας", "राहुल शर्मा", "Ümit Yıldız", "Rosa Park"]
TOKENIZERS = {"builtin": builtin_tokenizer, "smollm2": smollm2_tokenizer}


def _expected(logits: torch.Tensor, first: int, target: list[int], scored: int, unit: int) -> dict:
    """The scores of one row, token by token from its [seq, vocab] logits."""
    steps = [logits[first + scored + j].double() for j in range(unit)]
    tokens = target[scored : scored + unit]
    ranks = [1 + int((s > s[t]).sum()) for s, t in zip(steps, tokens)]
    prob = 1.0
    for s, t in zip(steps, tokens):
        prob *= float(torch.softmax(s, -1)[t])
    logp = torch.log_softmax(logits.double(), -1)
    whole = sum(float(logp[first + j, t]) for j, t in enumerate(target))
    return {"rank": max(ranks), "prob": prob, "target_logprob": whole, "predicted_id": int(steps[0].argmax())}


def _check(found: TargetScore | dict, expected: dict) -> None:
    """`found`: score_rows' TargetScore, or a row of Grafter.score's table (its columns)."""
    found = asdict(found) if isinstance(found, TargetScore) else found
    assert found["rank"] == expected["rank"]
    assert found["prob"] == pytest.approx(expected["prob"], rel=1e-4, abs=1e-12)
    assert found["target_logprob"] == pytest.approx(expected["target_logprob"], rel=1e-4, abs=1e-5)
    assert found["predicted_id"] == expected["predicted_id"]


def test_score_rows_scores_a_unit_by_its_worst_rank_and_the_product_of_its_probabilities():
    generator = torch.Generator().manual_seed(0)
    vocab = 40
    logits = torch.randn(4, 9, vocab, generator=generator) * 3
    first_steps = [2, 0, 1, 3]
    targets = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16], [17, 18]]
    scored, units = [1, 0, 0, 0], [3, 1, 4, 2]
    found = score_rows(logits, first_steps, targets, scored, units)
    for row, score in enumerate(found):
        _check(score, _expected(logits[row], first_steps[row], targets[row], scored[row], units[row]))
    # the same from one [seq, vocab] tensor per row
    ragged = score_rows([logits[r] for r in range(4)], first_steps, targets, scored, units)
    assert [r.rank for r in ragged] == [r.rank for r in found]
    # a unit of one token is the scored token alone, as without units, bit for bit
    alone = score_rows(logits, first_steps, targets, scored)
    assert score_rows(logits, first_steps, targets, scored, [1] * 4) == alone
    assert [a.rank for a in alone] != [f.rank for f in found]  # the units change the ranks here


def test_a_unit_outside_its_target_is_refused():
    with pytest.raises(ValueError, match="scored unit of 2 token.*does not fit its target's 2 tokens"):
        score_rows(torch.zeros(1, 3, 10), [0], [[1, 2]], [1], [2])
    with pytest.raises(ValueError, match="scored unit of 0 token"):
        score_rows(torch.zeros(1, 3, 10), [0], [[1, 2]], [0], [0])


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


@pytest.mark.parametrize("which", list(TOKENIZERS))
@torch.no_grad()
def test_grafter_score_on_names_in_several_scripts_equals_the_full_logits(which):
    tokenizer = TOKENIZERS[which]()
    pre, sft = _model(len(tokenizer), 0), _model(len(tokenizer), 1)
    grafter = Grafter(pre, sft)
    prompt = Prompt(tokenizer, "Gus Hale stars in a movie alongside", first_entity="Gus Hale")
    table = grafter.score(
        [prompt] * len(NAMES), [" " + n for n in NAMES], grafts={"PRE": None, "FE+LT": Graft("FE+LT")}
    )
    rows = {(r["condition"], r["prompt"]): r for r in table.to_dicts()}
    n = len(prompt.input_ids)
    units = 0
    for index, name in enumerate(NAMES):
        enc = prompt.encode(" " + name)
        assert tokenizer.decode(enc.unit_ids).lstrip().startswith(name[0])
        units += enc.unit > 1
        ids = torch.tensor([prompt.input_ids + enc.target_ids[:-1]])
        plain = pre(ids).logits[0].float()  # the recipient: a plain forward pass, no engine
        _check(rows[("PRE", index)], _expected(plain, n - 1, enc.target_ids, enc.scored, enc.unit))
        graft = Graft([*prompt.positions("FE+LT"), *range(n, ids.shape[1])])
        grafted = grafter.logits(ids, grafts=graft)[0].float()
        _check(rows[("FE+LT", index)], _expected(grafted, n - 1, enc.target_ids, enc.scored, enc.unit))
        assert rows[("PRE", index)]["top5"] == (rows[("PRE", index)]["rank"] <= 5)
        assert (rows[("PRE", index)]["note"] != "") == (enc.unit > 1 or enc.scored > 0)
    assert units >= 6, f"{which}: only {units} names have a unit of several tokens"


def test_a_competitor_is_refused_where_a_first_character_is_split():
    """Two CJK names' units both begin with `'\\xe6'`: a logit difference at that step is 0 and
    says nothing; the API refuses it and names the comparison that does."""
    tokenizer = builtin_tokenizer()
    grafter = Grafter(_model(len(tokenizer), 0), _model(len(tokenizer), 1))
    prompt = Prompt(tokenizer, "Gus Hale stars in a movie alongside", first_entity="Gus Hale")
    with pytest.raises(ValueError, match="splits over 3 tokens.*compare their `prob`"):
        grafter.score(prompt, " 李小龍", competitors=" 林志玲")
    with pytest.raises(ValueError, match="' Émile' begins with a character the tokenizer splits over 2 tokens"):
        grafter.score(prompt, " Rosa Park", competitors=" Émile")
    row = grafter.score(prompt, " Rosa Park", competitors=" Zoe").to_dicts()[0]
    assert row["logit_diff"] is not None
