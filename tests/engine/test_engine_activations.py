"""Activations under a graft (issue 39, item 3): `Grafter.run`'s hidden states and attention
patterns, every activation of `Grafter.cache` under its stable name, and `Grafter.lens`, equal the
per-token reference grafter's (`reference_activations`) on all 14 tiny architectures, on a
left-padded batch whose rows carry their own grafts."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import (
    ATOL,
    grafter_for,
    max_diff,
    pad_batch,
    pair,
    random_prompt,
    random_spec,
    stable_seed,
    to_grafts,
)
from reference_activations import reference_activations, reference_modules
from reference_grafter import component_table
from tiny_model_fixtures import ARCHS


def _world(arch: str):
    """A grafter, a left-padded batch of two rows (7 and 4 tokens) with their own grafts, and
    each row's reference activations."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("activations", arch))
    rows = [random_prompt(rng, 7), random_prompt(rng, 4)]
    specs = [random_spec(rng, recipient.config, len(r), allow_mask=False) for r in rows]
    ids, mask = pad_batch(rows, "left")
    refs = [reference_activations(recipient, donor, r, s, grafter.num_layers) for r, s in zip(rows, specs)]
    return grafter, ids, mask, [to_grafts(s) for s in specs], refs


@pytest.mark.parametrize("arch", ARCHS)
@torch.no_grad()
def test_cache_and_run_equal_the_reference(arch):
    grafter, ids, mask, row_grafts, refs = _world(arch)
    acts = grafter.cache(ids, row_grafts=row_grafts, attention_mask=mask)
    assert set(acts) == set(reference_modules(grafter.recipient.config, grafter.num_layers))
    out = grafter.run(
        ids, row_grafts=row_grafts, attention_mask=mask, output_hidden_states=True, output_attentions=True
    )
    largest = 0.0
    for b, ref in enumerate(refs):
        real = mask[b].nonzero().flatten()
        for name, value in acts.items():
            got = value[b, real].reshape(len(real), -1)
            diff = max_diff(got, ref["acts"][name])
            assert diff < ATOL, f"{arch} row {b} {name}: {diff:.3g}"
            largest = max(largest, diff)
        hidden = torch.stack([h[b, real] for h in out.hidden_states])
        assert max_diff(hidden, ref["hidden_states"]) < ATOL, arch
        pattern = torch.stack([a[b][:, real][:, :, real] for a in out.attentions])
        assert max_diff(pattern, ref["attentions"]) < ATOL, arch
        assert max_diff(out.logits[b, real], ref["logits"]) < ATOL, arch
        largest = max(largest, max_diff(hidden, ref["hidden_states"]), max_diff(pattern, ref["attentions"]))
    expected = grafter.logits(ids, row_grafts=row_grafts, attention_mask=mask)
    assert max_diff(out.logits, expected) < ATOL
    print(f"{arch}: largest difference from the reference {largest:.2e}")


@pytest.mark.parametrize("arch", ["gpt2", "gemma2", "llama"])
@torch.no_grad()
def test_the_logit_lens_reads_the_references_residual_stream(arch):
    grafter, ids, mask, row_grafts, refs = _world(arch)
    lens = grafter.lens(ids, row_grafts=row_grafts, attention_mask=mask)
    assert lens.shape == (2, grafter.num_layers, grafter.recipient.config.vocab_size)
    model = grafter.recipient
    _, table, _ = component_table(model.config)
    norm, head = model.get_submodule(table["ln_final"][0][0]), model.get_submodule(table["lm_head"][0][0])
    cap = getattr(model.config, "final_logit_softcapping", None)
    for b, ref in enumerate(refs):
        stream = torch.stack([ref["acts"][f"blocks.{i}.resid_post"][-1] for i in range(grafter.num_layers)])
        want = head(norm(stream))
        want = torch.tanh(want / cap) * cap if cap else want
        assert max_diff(lens[b], want) < ATOL, arch


def test_names_select_by_pattern_and_unknown_names_are_refused():
    grafter, ids, mask, row_grafts, _ = _world("llama")
    acts = grafter.cache(ids, row_grafts=row_grafts, attention_mask=mask, names=["blocks.*.resid_post", "embed"])
    assert list(acts) == ["embed"] + [f"blocks.{i}.resid_post" for i in range(grafter.num_layers)]
    assert acts["blocks.0.resid_post"].shape == (*ids.shape, grafter.recipient.config.hidden_size)
    heads = grafter.recipient.config.num_attention_heads
    assert grafter.cache(ids, attention_mask=mask, names="blocks.1.z")["blocks.1.z"].shape[2] == heads
    with pytest.raises(ValueError, match=r"no activation is named \['blocks.0.mlp_out'\]"):
        grafter.cache(ids, attention_mask=mask, names=["blocks.0.mlp_out"])
