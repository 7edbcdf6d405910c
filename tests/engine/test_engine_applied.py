"""`Grafter.applied` (issue 39, item 4): the graft installed on the recipient, so that the user's
own forward, forward hooks and `generate` run grafted: bit for bit `Grafter.logits` on CPU, the
same tokens as `Grafter.generate`, and everything restored on exit, exception or not."""

from __future__ import annotations

import importlib.util
import random

import pytest
import torch

from engine_fixtures import assert_unchanged, grafter_for, pair, random_prompt, snapshot, stable_seed
from tiny_model_fixtures import ARCHS
from weightgraft import Graft


def _hooks_of(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


@pytest.mark.parametrize("arch", ARCHS)
@torch.no_grad()
def test_a_plain_forward_inside_equals_logits_bit_for_bit(arch):
    grafter = grafter_for(arch)
    model = grafter.recipient
    rng = random.Random(stable_seed("applied", arch))
    ids = torch.tensor([random_prompt(rng, 8)])
    graft = [Graft([1, 3, -1], "last_half", ["attn", "mlp"]), Graft(0, 0, "all")]
    expected = grafter.logits(ids, grafts=graft)
    with grafter.applied(graft, ids=ids):
        got = model(ids).logits
    assert torch.equal(got, expected), arch
    assert not torch.equal(model(ids).logits, expected)  # the graft matters, and is gone


@torch.no_grad()
def test_a_batch_and_the_users_own_hooks_run_grafted():
    grafter = grafter_for("llama")
    grafter.share_prefixes = False
    model = grafter.recipient
    rng = random.Random(1)
    ids = torch.tensor([random_prompt(rng, 6), random_prompt(rng, 6)])
    rows = [Graft("last", "all", "o"), Graft([0, 2], [1, 2], "mlp")]
    seen = {}
    with grafter.applied(row_grafts=rows, ids=ids):
        block = grafter.adapter.decoder_layers(model)[2]
        handle = block.register_forward_hook(
            lambda _m, _a, out: seen.update(h=(out[0] if isinstance(out, tuple) else out))
        )
        got = model(ids).logits
        handle.remove()
    assert torch.equal(got, grafter.logits(ids, row_grafts=rows))
    cached = grafter.cache(ids, row_grafts=rows, names="blocks.2.resid_post")["blocks.2.resid_post"]
    assert torch.equal(seen["h"], cached)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma2"])
@torch.no_grad()
def test_generate_inside_equals_the_grafters_generate(arch):
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("applied-generate", arch))
    ids = torch.tensor([random_prompt(rng, 6)])
    graft = Graft([0, -1], "all", ["o", "mlp"])
    expected = grafter.generate(ids, grafts=graft, max_new_tokens=6)
    with grafter.applied(graft, ids=ids):
        got = grafter.recipient.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False)
    assert torch.equal(got, expected), arch
    plain = grafter.generate(ids, max_new_tokens=6)
    assert not torch.equal(plain, expected), arch  # the graft changes the text


def test_everything_is_restored_after_an_exception():
    recipient, donor = pair("gpt2")
    grafter = grafter_for("gpt2")
    model = grafter.recipient
    model.train()
    before, hooks = snapshot(model), _hooks_of(model)
    ids = torch.tensor([[5, 6, 7, 8]])
    with pytest.raises(RuntimeError, match="user code failed"):
        with grafter.applied(Graft("all", "all", "all"), ids=ids):
            assert _hooks_of(model) > hooks
            raise RuntimeError("user code failed")
    assert _hooks_of(model) == hooks and model.training and grafter.share_prefixes
    model.eval()
    before["training"] = False
    assert_unchanged(model, before, "recipient")
    with torch.no_grad():
        assert torch.equal(model(ids).logits, grafter.logits(ids))


def test_applied_needs_ids():
    with pytest.raises(ValueError, match="applied needs ids="):
        grafter_for("llama").applied(Graft())


@pytest.mark.skipif(importlib.util.find_spec("nnsight") is None, reason="nnsight is not installed (a test extra)")
def test_an_nnsight_trace_inside_reads_the_grafted_hidden_state():
    from nnsight import NNsight

    grafter = grafter_for("llama")
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    graft = Graft("last", "all", "mlp")
    traced = NNsight(grafter.recipient)
    with grafter.applied(graft, ids=ids):
        with traced.trace(ids):
            hidden = traced.model.layers[1].output.save()  # a decoder block returns a tensor in transformers 5
    hidden = getattr(hidden, "value", hidden)
    want = grafter.cache(ids, grafts=graft, names="blocks.1.resid_post")["blocks.1.resid_post"]
    plain = grafter.cache(ids, names="blocks.1.resid_post")["blocks.1.resid_post"]
    assert torch.equal(hidden.detach(), want)
    assert (want - plain).abs().max().item() > 1e-3  # what the trace read is the grafted state
