"""Attribution on MoE models whose adapters are inferred with new shapes: GraniteMoeShared (a
shared MLP beside the MoE block) and Llama 4 (experts called 'per_expert', whose router's scores
scale the experts' input). Each cell's and each expert's score is what grafting it changes, to
first order: central differences of the engine's exact grafts with a donor a small step away,
in float64, as tests/attribution/test_attribution_experts.py does for the registered MoE models;
and the donor-everywhere pass is the donor."""

from __future__ import annotations

import pytest
import torch

from inferred_fixtures import make_model

EPS = 1e-3  # float32-exact metrics in places (eager softmax), central differences: see test_attribution_units
IDS = torch.tensor([[3, 77, 12, 140, 9, 51]])
TARGET = 42


def _pair64(kind: str):
    recipient, donor = (make_model(kind, seed).double() for seed in (11, 12))
    for model in (recipient, donor):
        model.config._experts_implementation = "eager"  # grouped_mm takes no float64 on CPU
    return recipient, donor


def _logprob(grafter, graft) -> float:
    return float(torch.log_softmax(grafter.last_logits(IDS, graft)[0].double(), -1)[TARGET])


@pytest.mark.parametrize("kind", ["granitemoeshared", "llama4_text"])
def test_cell_and_expert_scores_are_first_order_effects(kind):
    from weightgraft import Graft, Grafter
    from weightgraft.attribution import attribute
    from weightgraft.donors import ShapedDonor

    recipient, donor = _pair64(kind)
    sides = [Grafter(recipient, ShapedDonor(donor, scale=s * EPS)) for s in (1, -1)]
    scores = [attribute(g, IDS, [TARGET], method="gradient", grain="expert") for g in sides]
    strongest = 0.0
    for position, layer in [(5, 2), (3, 1), (5, 0)]:
        per_expert = (scores[0].units["experts"] - scores[1].units["experts"])[0, position, layer] / (2 * EPS)
        unit = int(per_expert.abs().argmax())
        strongest = max(strongest, abs(float(per_expert[unit])))
        grafts = {"expert": Graft([position], [layer], "experts", experts=[unit])}
        grafts |= {c: Graft([position], [layer], c) for c in ("router", "experts", "shared_expert", "ln2")}
        for name, graft in grafts.items():
            numeric = (_logprob(sides[0], graft) - _logprob(sides[1], graft)) / (2 * EPS)
            if name == "expert":
                got = float(per_expert[unit])
            else:
                c = scores[0].layer_components.index(name)
                got = float(scores[0].cells[0, position, layer, c] - scores[1].cells[0, position, layer, c]) / (2 * EPS)
            assert got == pytest.approx(numeric, rel=1e-3, abs=3e-4), f"{kind} {name} at {position}, {layer}"
    assert strongest > 3e-3, f"{kind}: effects this small prove nothing"


@pytest.mark.parametrize("kind", ["granitemoeshared", "llama4_text"])
def test_experts_add_up_and_the_donor_is_the_donor(kind):
    from weightgraft import Grafter
    from weightgraft.attribution import attribute

    recipient, donor = _pair64(kind)
    attr = attribute(Grafter(recipient, donor), IDS, [TARGET], method="gradient", grain="expert")
    c = attr.layer_components.index("experts")
    assert torch.allclose(attr.units["experts"].sum(-1), attr.cells[..., c], atol=1e-10)
    with torch.no_grad():
        want = torch.log_softmax(donor(IDS).logits[0, -1], -1)[TARGET]
    assert float(attr.metric_donor[0]) == pytest.approx(float(want), abs=1e-9)
