"""`Grafter.score` scores the runner's token where a target's leading space is a token of its own
(issue 39, "Scores"): with the built-in byte-level tokenizer, " Émile Zola" is `' '` then
`'\\xc3'` ...; the API scores the first content token after the space, teacher-forced, as the
runner does, and says so in its note, where scoring the target's first token would score the space."""

from __future__ import annotations

from functools import lru_cache

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from weightgraft import Graft, Grafter, Prompt


@lru_cache(maxsize=1)
def _tokenizer():
    from weightgraft.training import builtin, builtin_specs

    spec = builtin_specs.SPECS["default"]
    return builtin.pretraining_tokenizer(spec, builtin.build_world(spec))


def _model(vocab: int, seed: int):
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, bos_token_id=1, pad_token_id=0, eos_token_id=None,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


@torch.no_grad()
def test_score_scores_the_first_content_token_after_a_whitespace_token():
    tok = _tokenizer()
    pre, sft = _model(len(tok), 0), _model(len(tok), 1)
    grafter = Grafter(pre, sft)
    prompt = Prompt(tok, "Gus Hale stars in a movie alongside", first_entity="Gus Hale")
    target = " Émile Zola"
    enc = prompt.encode(target)
    assert enc.scored == 1 and tok.decode([enc.target_ids[0]]) == " "
    row = grafter.score(prompt, target, grafts={"FE+LT": Graft("FE+LT")}).to_dicts()[0]
    ids = torch.tensor([prompt.input_ids + enc.target_ids[:-1]])
    graft = Graft([*prompt.positions("FE+LT"), *range(len(prompt.input_ids), ids.shape[1])])
    logits = grafter.logits(ids, grafts=graft)[0].float()
    step = logits[len(prompt.input_ids) - 1 + enc.scored]
    assert row["rank"] == 1 + int((step > step[enc.scored_id]).sum())
    assert row["prob"] == pytest.approx(torch.softmax(step, -1)[enc.scored_id].item(), rel=1e-4)
    assert row["note"].startswith("scored target token 2 of ") and "whitespace-only ' '" in row["note"]
    logp = torch.log_softmax(logits, -1)
    whole = sum(logp[len(prompt.input_ids) - 1 + j, t].item() for j, t in enumerate(enc.target_ids))
    assert row["target_logprob"] == pytest.approx(whole, rel=1e-4)
