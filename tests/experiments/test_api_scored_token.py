"""`Grafter.score` scores the runner's token where a target's leading space is a token of its own
(issue 39, "Scores"): with the built-in byte-level tokenizer, " Émile Zola" is `' '` then
`'\\xc3'` ...; the API scores the first content token after the space, teacher-forced, as the
runner does, and says so in its note, where scoring the target's first token would score the space.
The scored unit is the space's follower and the rest of É's bytes (issue 41, item 3)."""

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
    # the scored unit is É's two byte tokens after the space (issue 41, item 3), teacher-forced
    assert enc.unit == 2 and tok.decode(enc.unit_ids) == "É"
    steps = [logits[len(prompt.input_ids) - 1 + enc.scored + j] for j in range(2)]
    ranks = [1 + int((s > s[t]).sum()) for s, t in zip(steps, enc.unit_ids)]
    probs = [torch.softmax(s, -1)[t].item() for s, t in zip(steps, enc.unit_ids)]
    assert row["rank"] == max(ranks)
    assert row["prob"] == pytest.approx(probs[0] * probs[1], rel=1e-4)
    assert row["predicted_id"] == int(steps[0].argmax())
    assert row["note"].startswith("scored unit: target tokens 2-3 of ") and "whitespace-only ' '" in row["note"]
    logp = torch.log_softmax(logits, -1)
    whole = sum(logp[len(prompt.input_ids) - 1 + j, t].item() for j, t in enumerate(enc.target_ids))
    assert row["target_logprob"] == pytest.approx(whole, rel=1e-4)
