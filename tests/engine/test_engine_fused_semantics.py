"""What q, k, v, gate and up mean, checked by known answers that need neither the engine's nor our
reference's split tables: donors built from the recipient by one exact change.

- A single-token row attends to one key with weight 1: grafting q or k changes nothing, v does.
- q scaled by 2 gives the same scores as k scaled by 2 (RoPE is linear), so grafting "q" from a
  donor whose q is doubled equals the recipient with its k doubled, and vice versa.
- v negated (weight and bias) negates every head's output, so grafting "v" from that donor equals
  the recipient with its output projection's weight negated (its bias kept).
- Phi-3's up half of gate_up negated negates the MLP's product, as negating down_proj does;
  grafting "gate" from that donor changes nothing.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch

from engine_fixtures import ATOL, max_diff, pair, random_prompt, stable_seed, to_grafts
from reference_grafter import GraftSpec

FUSED = ["gpt2", "gpt_neox", "gpt_neox_serial", "phi3"]


def _qkv_rows(model, layer: int, part: str):
    """(parameters, dim, indices) of `part` in layer `layer`, from the HF layouts (see docstring
    of tests/reference_grafter.py for the sources)."""
    config = model.config
    if config.model_type == "gpt2":
        attn = model.transformer.h[layer].attn
        d = config.n_embd
        idx = torch.arange("qkv".index(part) * d, ("qkv".index(part) + 1) * d)
        return [(attn.c_attn.weight, 1, idx), (attn.c_attn.bias, 0, idx)], attn.c_proj.weight
    if config.model_type == "gpt_neox":
        attn = model.gpt_neox.layers[layer].attention
        heads, hs = config.num_attention_heads, config.hidden_size // config.num_attention_heads
        which = "qkv".index(part)
        idx = torch.cat([torch.arange(h * 3 * hs + which * hs, h * 3 * hs + (which + 1) * hs) for h in range(heads)])
        return [(attn.query_key_value.weight, 0, idx), (attn.query_key_value.bias, 0, idx)], attn.dense.weight
    if config.model_type == "phi3":
        attn = model.model.layers[layer].self_attn
        hd = config.hidden_size // config.num_attention_heads
        nq, nkv = config.num_attention_heads * hd, config.num_key_value_heads * hd
        start = {"q": 0, "k": nq, "v": nq + nkv}[part]
        stop = start + (nq if part == "q" else nkv)
        return [(attn.qkv_proj.weight, 0, torch.arange(start, stop))], attn.o_proj.weight
    raise KeyError(config.model_type)


@torch.no_grad()
def _scaled(model, layer: int, part: str, factor: float):
    out = copy.deepcopy(model)
    params, _ = _qkv_rows(out, layer, part)
    for param, dim, idx in params:
        param.index_copy_(dim, idx, param.index_select(dim, idx) * factor)
    return out


def _grafter(recipient, donor):
    from weightgraft import Grafter

    return Grafter(recipient, donor)


@pytest.mark.parametrize("arch", FUSED + ["llama", "qwen2"])
def test_single_token_q_and_k_grafts_change_nothing(arch):
    recipient, donor = pair(arch)
    grafter = _grafter(recipient, donor)
    ids = torch.tensor([[17], [93]])
    plain = recipient(ids).logits
    for part, changes in [("q", False), ("k", False), ("v", True), (["q", "k"], False)]:
        got = grafter.logits(ids, grafts=to_grafts(GraftSpec("all", "all", part)))
        if changes:
            assert max_diff(got, plain) > 1e-3, f"{arch}: grafting v on one token changed nothing"
        else:
            assert max_diff(got, plain) < ATOL, f"{arch}: grafting {part} on one token changed the output"


@pytest.mark.parametrize("arch", FUSED)
def test_q_and_k_parts_are_the_right_slices(arch):
    recipient, _ = pair(arch)
    row = random_prompt(random.Random(stable_seed("qk", arch)), 6)
    ids = torch.tensor([row])
    layer = 0
    q_doubled, k_doubled = _scaled(recipient, layer, "q", 2.0), _scaled(recipient, layer, "k", 2.0)
    want = k_doubled(ids).logits  # == q_doubled(ids).logits, by the bilinearity of the scores
    assert max_diff(want, q_doubled(ids).logits) < ATOL
    assert max_diff(want, recipient(ids).logits) > 1e-3
    spec = to_grafts(GraftSpec("all", layer, "q"))
    assert max_diff(_grafter(recipient, q_doubled).logits(ids, grafts=spec), want) < ATOL, f"{arch}: q"
    spec = to_grafts(GraftSpec("all", layer, "k"))
    assert max_diff(_grafter(recipient, k_doubled).logits(ids, grafts=spec), want) < ATOL, f"{arch}: k"
    # and the wrong part grafts nothing at all
    assert max_diff(_grafter(recipient, q_doubled).logits(ids, grafts=spec), recipient(ids).logits) < ATOL


@pytest.mark.parametrize("arch", FUSED)
@torch.no_grad()
def test_v_part_is_the_right_slice(arch):
    recipient, _ = pair(arch)
    row = random_prompt(random.Random(stable_seed("v", arch)), 6)
    ids = torch.tensor([row])
    layer = 1
    v_negated = _scaled(recipient, layer, "v", -1.0)
    o_negated = copy.deepcopy(recipient)
    _, out_weight = _qkv_rows(o_negated, layer, "v")
    out_weight.neg_()
    want = o_negated(ids).logits
    assert max_diff(want, v_negated(ids).logits) < ATOL
    for part, expected in [("v", want), ("q", recipient(ids).logits), ("k", recipient(ids).logits)]:
        got = _grafter(recipient, v_negated).logits(ids, grafts=to_grafts(GraftSpec("all", layer, part)))
        assert max_diff(got, expected) < ATOL, f"{arch}: grafting {part} from a v-negated donor"


@torch.no_grad()
def test_phi3_gate_and_up_halves():
    recipient, _ = pair("phi3")
    inter = recipient.config.intermediate_size
    row = random_prompt(random.Random(stable_seed("phi3-mlp")), 6)
    ids = torch.tensor([row])
    layer = 1
    up_negated = copy.deepcopy(recipient)
    up_negated.model.layers[layer].mlp.gate_up_proj.weight[inter:].neg_()
    down_negated = copy.deepcopy(recipient)
    down_negated.model.layers[layer].mlp.down_proj.weight.neg_()
    want = down_negated(ids).logits
    assert max_diff(want, up_negated(ids).logits) < ATOL
    assert max_diff(want, recipient(ids).logits) > 1e-3
    grafter = _grafter(recipient, up_negated)
    got_up = grafter.logits(ids, grafts=to_grafts(GraftSpec("all", layer, "up")))
    got_gate = grafter.logits(ids, grafts=to_grafts(GraftSpec("all", layer, "gate")))
    assert max_diff(got_up, want) < ATOL, "phi3: up is not the second half of gate_up_proj"
    assert max_diff(got_gate, recipient(ids).logits) < ATOL, "phi3: gate touches the up half"
