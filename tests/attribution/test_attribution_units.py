"""Head and neuron attribution: gradient scores against finite differences of the exact unit
graft (the engine grafting one head or neuron with the change scaled by ±eps, in float64), and
integrated scores that add up to the total effect."""

from __future__ import annotations

import pytest
import torch

from tiny_model_fixtures import make_pair

# Some eager attentions take their softmax in float32 even in a float64 model, so the metric is
# only float32-exact: eps=1e-3 keeps that noise (~1e-7/eps) and the central difference's error
# (~eps^2) both near 1e-4, as in test_attribution_attribute. Hence abs=3e-4, rel=1e-3.
EPS = 1e-3


def _pair64(arch: str):
    recipient, donor = make_pair(arch)
    return recipient.double(), donor.double()


def _logprob(grafter, ids, target, graft) -> float:
    logits = grafter.last_logits(ids, graft)
    return float(torch.log_softmax(logits[0].double(), -1)[target])


@pytest.mark.parametrize(
    ("arch", "grain", "cells"),
    [
        ("llama", "head", [(5, 1, "o"), (2, 0, "q"), (4, 1, "k"), (5, 0, "v")]),
        ("gpt2", "head", [(5, 2, "o"), (3, 1, "q"), (5, 0, "v")]),
        ("gpt_neox", "head", [(5, 3, "o"), (4, 2, "k")]),
        ("phi3", "head", [(5, 1, "o"), (3, 0, "v")]),
        ("llama", "neuron", [(5, 1, "down"), (3, 0, "gate"), (5, 1, "up")]),
        ("gpt2", "neuron", [(5, 2, "down"), (4, 1, "up")]),
        ("phi3", "neuron", [(5, 1, "gate"), (2, 0, "down")]),
    ],
)
def test_gradient_units_match_finite_differences(arch, grain, cells):
    """d metric / d eps of the engine's exact graft of one unit with scale eps (ShapedDonor), by
    central differences (tolerance: see EPS)."""
    from weightgraft import Graft, Grafter
    from weightgraft.attribution import attribute
    from weightgraft.donors import ShapedDonor

    recipient, donor = _pair64(arch)
    ids = torch.tensor([[3, 77, 12, 140, 9, 51]])
    target = 42
    attr = attribute(Grafter(recipient, donor), ids, [target], method="gradient", grain=grain)
    plus = Grafter(recipient, ShapedDonor(donor, scale=EPS))
    minus = Grafter(recipient, ShapedDonor(donor, scale=-EPS))
    for position, layer, comp in cells:
        unit = int(attr.units[comp][0, position, layer].abs().argmax())  # the cell's strongest unit
        kind = {"head": "heads", "neuron": "neurons"}[grain]
        graft = Graft([position], [layer], comp, **{kind: [unit]})
        numeric = (_logprob(plus, ids, target, graft) - _logprob(minus, ids, target, graft)) / (2 * EPS)
        got = float(attr.units[comp][0, position, layer, unit])
        assert got == pytest.approx(numeric, rel=1e-3, abs=3e-4), f"{arch} {comp} unit {unit}: {got} vs {numeric}"
        assert abs(numeric) > 3e-3, f"{arch} {comp} unit {unit}: an effect this small proves nothing"


@pytest.mark.parametrize(
    ("arch", "grain"), [("llama", "head"), ("llama", "neuron"), ("phi3", "head"), ("qwen2", "head")]
)
def test_integrated_units_sum_to_the_total(arch, grain):
    """These models have no o/down bias, so each component's units are a partition of its cell
    (equal to 1e-10 in float64: the same products summed in another order); with the units in
    place of their components the scores sum to metric(donor) - metric(recipient) within the
    midpoint rule's error (measured at most 0.43% of the total at 32 steps; 5% allowed)."""
    from weightgraft import Grafter
    from weightgraft.attribution import attribute

    recipient, donor = _pair64(arch)
    ids = torch.tensor([[3, 77, 12, 140, 9, 51], [8, 1, 99, 23, 60, 4]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])  # right-padded: float64 eager gives NaN on left pads
    attr = attribute(
        Grafter(recipient, donor), ids, [42, 7], attention_mask=mask, method="integrated", steps=32, grain=grain
    )
    total = attr.model_level.sum((1, 2)).clone()
    for c, comp in enumerate(attr.layer_components):
        if comp in attr.units:
            part = attr.units[comp].sum((1, 2, 3))
            assert torch.allclose(part, attr.cells[..., c].sum((1, 2)), atol=1e-10), comp
            total += part
        else:
            total += attr.cells[..., c].sum((1, 2))
    assert set(attr.units) == ({"q", "k", "v", "o"} if grain == "head" else {"gate", "up", "down"} & set(attr.units))
    exact = attr.exact_total
    assert torch.all((total - exact).abs() <= 0.05 * exact.abs()), (total, exact)
    assert attr.units["q" if grain == "head" else "down"][1, 4:].abs().sum() == 0  # past row 1's 4 tokens


def test_o_bias_share_is_what_units_leave_out():
    """GPT-2's c_proj has a bias: at the recipient, cells - units.sum(-1) for o is <g, Δb>, the
    bias's share, checked against the gradient of the same cell with the o weights' change
    removed (a donor whose c_proj weights are the recipient's)."""
    import copy

    from weightgraft import Grafter
    from weightgraft.attribution import attribute

    recipient, donor = _pair64("gpt2")
    only_bias = copy.deepcopy(donor)
    with torch.no_grad():
        for layer in range(3):
            only_bias.transformer.h[layer].attn.c_proj.weight.copy_(recipient.transformer.h[layer].attn.c_proj.weight)
    ids = torch.tensor([[3, 77, 12, 140, 9, 51]])
    attr = attribute(Grafter(recipient, donor), ids, [42], grain="head")
    bias = attribute(Grafter(recipient, only_bias), ids, [42])
    o = attr.layer_components.index("o")
    share = attr.cells[..., o] - attr.units["o"].sum(-1)
    assert torch.allclose(share, bias.cells[..., o], atol=1e-10)
    assert share.abs().max() > 1e-4


def test_bad_grain():
    from weightgraft import Grafter
    from weightgraft.attribution import attribute

    recipient, donor = make_pair("llama")
    with pytest.raises(ValueError, match="grain must be one of"):
        attribute(Grafter(recipient, donor), torch.tensor([[1, 2]]), [3], grain="heads")
