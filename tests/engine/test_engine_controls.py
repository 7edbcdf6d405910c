"""Controls: random grafts of the same size, and the necessity complement."""

from __future__ import annotations

import pytest
import torch

from engine_fixtures import grafter_for, max_diff


def test_random_heads_same_size_seeded_and_distinct():
    from weightgraft import Graft
    from weightgraft.engine.controls import random_like

    grafter = grafter_for("gpt_neox")
    graft = Graft("last", "last_half", "o", heads=[1, 3])
    draws = random_like(graft, grafter, n_draws=4, seed=7)
    assert len(draws) == 4
    assert all(len(d.units[1]) == 2 and d.units[0] == "heads" for d in draws)
    assert all(d.layers == "last_half" and d.positions == "last" and d.components == "o" for d in draws)
    picked = [d.units[1] for d in draws]
    assert len(set(picked)) == 4 and (1, 3) not in picked
    assert [d.units[1] for d in random_like(graft, grafter, n_draws=4, seed=7)] == picked
    assert [d.units[1] for d in random_like(graft, grafter, n_draws=4, seed=8)] != picked


def test_random_layers_positions_and_neurons():
    from weightgraft import Graft
    from weightgraft.engine.controls import ControlError, random_like

    grafter = grafter_for("llama")
    graft = Graft([0, 2], [1, 3], "mlp", neurons=[4, 5, 6])
    for vary, size in (("layers", 2), ("neurons", 3)):
        draws = random_like(graft, grafter, n_draws=3, seed=1, vary=vary)
        counts = [len(d.layer_indices(4)) if vary == "layers" else len(d.units[1]) for d in draws]
        assert counts == [size] * 3
    draws = random_like(graft, grafter, n_draws=3, seed=1, vary=["positions", "layers"], length=6)
    assert all(len(d.position_indices(6)) == 2 and len(d.layer_indices(4)) == 2 for d in draws)
    assert len({(tuple(d.position_indices(6)), tuple(d.layer_indices(4))) for d in draws}) == 3
    with pytest.raises(ControlError, match="length="):
        random_like(graft, grafter, vary="positions")
    with pytest.raises(ControlError, match="names no heads"):
        random_like(graft, grafter, vary="heads")
    with pytest.raises(ControlError, match="only 3 random draws"):  # 4 layers choose 3, minus the graft
        random_like(Graft("last", [0, 1, 2], "o"), grafter, n_draws=4)
    # the draws run: logits differ from the graft's own
    ids = torch.tensor([[5, 17, 33, 9, 61, 2]])
    mine = grafter.logits(ids, graft)
    assert all(max_diff(grafter.logits(ids, d), mine) > 1e-4 for d in random_like(graft, grafter, 2, seed=3))


@pytest.mark.parametrize("arch", ["gpt2", "llama", "phi3"])
def test_complement_and_graft_make_the_donor(arch):
    """The complement covers exactly what the graft does not: together they are every key at
    every position (the engine's masks are those of Graft("all", "all", "all")), so the logits
    are the same computation; the complement alone is not the donor."""
    from weightgraft import Graft
    from weightgraft.engine.controls import complement

    grafter = grafter_for(arch)
    ids = torch.tensor([[5, 17, 33, 9, 61, 2]])
    donor = grafter.logits(ids, Graft())
    for graft in (
        Graft("last", "last_half", "o", heads=[1, 3]),
        Graft([1, 4], [0], ["q", "k"], heads=[0]),
        Graft("all", -1, "mlp", neurons=[2, 7]),
        Graft("last", "all", "all"),
    ):
        rest = complement(graft, grafter, length=6)
        assert torch.equal(grafter.logits(ids, [graft, *rest]), donor), graft
        assert max_diff(grafter.logits(ids, rest), donor) > 1e-4, graft
