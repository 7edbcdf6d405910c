"""The reference itself is checked against plain HF forwards, so that a disagreement with the engine
points at the engine: per token with nothing grafted it is the recipient, with everything grafted
the donor, and a graft that is the same at every token equals one patched copy run on the row."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import ATOL, max_diff, pair, random_prompt, stable_seed
from reference_grafter import GraftSpec, reference_generate, reference_logits, resolve_row, static_graft_logits
from tiny_model_fixtures import ARCHS


@pytest.mark.parametrize("arch", ARCHS)
def test_reference_against_plain_forwards(arch):
    recipient, donor = pair(arch)
    # 9 tokens: longer than the sliding windows of the tiny gemma2/gemma3/mistral configs
    row = random_prompt(random.Random(stable_seed("self", arch)), 9)
    ids = torch.tensor([row])
    with torch.no_grad():
        plain_r, plain_d = recipient(ids).logits[0], donor(ids).logits[0]
    assert max_diff(reference_logits(recipient, donor, ids[0], None), plain_r) < ATOL
    assert max_diff(reference_logits(recipient, donor, ids[0], GraftSpec()), plain_d) < ATOL
    spec = GraftSpec("all", "last_half", ["attn", "lm_head"])
    per_token = reference_logits(recipient, donor, ids[0], spec)
    static = static_graft_logits(recipient, donor, row, resolve_row(spec, len(row), recipient.config)[0])
    assert max_diff(per_token, static) < ATOL
    assert max_diff(per_token, plain_r) > 1e-3


@pytest.mark.parametrize("arch", ["gpt2", "gemma2"])
def test_reference_generation_without_grafts_is_hf_greedy(arch):
    recipient, donor = pair(arch)
    row = random_prompt(random.Random(stable_seed("gen-self", arch)), 5)
    with torch.no_grad():
        hf_out = recipient.generate(torch.tensor([row]), max_new_tokens=4, do_sample=False)
    assert reference_generate(recipient, donor, row, None, 4) == hf_out[0, 5:].tolist()
