"""Expert attribution on mixture-of-experts models: each expert's score, the router's and the
shared expert's are what grafting that cell changes, to first order (checked by central
differences of the engine's exact grafts with a donor a small step away, in float64); the experts
of a cell add up to its experts component; the donor-everywhere pass is the donor."""

from __future__ import annotations

import pytest
import torch

from tiny_model_fixtures import make_pair

EPS = 1e-3  # see test_attribution_units: float32-exact metrics, central differences
IDS = torch.tensor([[3, 77, 12, 140, 9, 51]])
TARGET = 42


def _pair64(arch: str):
    """float64 models; transformers' grouped_mm experts take no float64 on CPU, its eager loop does."""
    recipient, donor = (m.double() for m in make_pair(arch))
    for model in (recipient, donor):
        model.config._experts_implementation = "eager"
    return recipient, donor


def _logprob(grafter, graft) -> float:
    return float(torch.log_softmax(grafter.last_logits(IDS, graft)[0].double(), -1)[TARGET])


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe"])
def test_expert_router_and_shared_scores_are_first_order_effects(arch):
    """(score with donor +eps - score with donor -eps) / 2 equals (exact graft with +eps - exact
    graft with -eps) / 2, both divided by eps: the cell's output change is the same delta in both,
    so they differ by O(eps^2) only."""
    from weightgraft import Graft, Grafter
    from weightgraft.attribution import attribute
    from weightgraft.donors import ShapedDonor

    recipient, donor = _pair64(arch)
    sides = [Grafter(recipient, ShapedDonor(donor, scale=s * EPS)) for s in (1, -1)]
    scores = [attribute(g, IDS, [TARGET], method="gradient", grain="expert") for g in sides]
    comps = ["router", "experts"] + (["shared_expert", "shared_expert_gate"] if arch == "qwen2_moe" else [])
    for position, layer in [(5, 2), (3, 1), (5, 0)]:
        per_expert = (scores[0].units["experts"] - scores[1].units["experts"])[0, position, layer] / (2 * EPS)
        unit = int(per_expert.abs().argmax())
        grafts = {"expert": Graft([position], [layer], "experts", experts=[unit])}
        grafts |= {c: Graft([position], [layer], c) for c in comps}
        for name, graft in grafts.items():
            numeric = (_logprob(sides[0], graft) - _logprob(sides[1], graft)) / (2 * EPS)
            if name == "expert":
                got = float(per_expert[unit])
            else:
                c = scores[0].layer_components.index(name)
                got = float(scores[0].cells[0, position, layer, c] - scores[1].cells[0, position, layer, c]) / (2 * EPS)
            assert got == pytest.approx(numeric, rel=1e-3, abs=3e-4), f"{arch} {name} at {position}, {layer}"
        assert abs(float(per_expert[unit])) > 3e-3, f"{arch}: an effect this small proves nothing"


@pytest.mark.parametrize("method", ["gradient", "integrated"])
def test_experts_add_up_to_their_component_and_the_donor_is_the_donor(method):
    from weightgraft import Grafter
    from weightgraft.attribution import attribute

    recipient, donor = _pair64("olmoe")
    attr = attribute(Grafter(recipient, donor), IDS, [TARGET], method=method, steps=4, grain="expert")
    c = attr.layer_components.index("experts")
    assert attr.units["experts"].shape == (1, 6, 3, 4)
    assert torch.allclose(attr.units["experts"].sum(-1), attr.cells[..., c], atol=1e-10)
    assert attr.units["experts"].abs().sum() > 1e-2
    with torch.no_grad():
        want = torch.log_softmax(donor(IDS).logits[0, -1], -1)[TARGET]
    assert float(attr.metric_donor[0]) == pytest.approx(float(want), abs=1e-9)


def test_localize_grafts_expert_groups_as_experts():
    """An expert group (`experts#2`) becomes Graft(..., "experts", experts=[...]) per layer, and
    every expert of a layer is the whole experts component there."""
    from weightgraft import Graft, Grafter
    from weightgraft.attribution.localize import _grafts_for
    from weightgraft.attribution.role_examples import RoleExample

    recipient, donor = make_pair("mixtral")
    example = RoleExample("e", "f", "t", [3, 77, 12, 140], 42, {"LT": [3]}, ["a", "b", "c", "d"])
    grafts = _grafts_for(example, [("LT", 1, "experts#2"), ("LT", 1, "experts#0")])
    assert [(g.components, g.units) for g in grafts] == [("experts", ("experts", (0, 2)))]
    grafter = Grafter(recipient, donor)
    ids = torch.tensor([example.input_ids])
    every = _grafts_for(example, [("LT", 1, f"experts#{e}") for e in range(4)])
    assert torch.equal(grafter.logits(ids, every), grafter.logits(ids, Graft([3], [1], "experts")))
