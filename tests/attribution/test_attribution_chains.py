"""Attribution on chain components (several modules per cell: multi-latent attention's q, k and
kv_latent, BitNet's sub-norm chains, BLOOM's embedding and its norm): a cell's effect sums its
modules', so integrated gradients stay complete: over every cell they add up to the exact change
of grafting everything."""

from __future__ import annotations

import pytest
import torch

import census_models


@pytest.mark.parametrize("arch", ["minicpm3", "bitnet", "bloom"])
def test_integrated_gradients_add_up_to_the_whole_graft(arch):
    from weightgraft import Graft, Grafter, attribute

    recipient = census_models.build_tiny(arch, 0)
    grafter = Grafter(recipient, census_models.donor_of(recipient, 1))
    ids, target = torch.tensor([[5, 9, 33, 12, 40, 7]]), 17
    found = attribute(grafter, ids, [target], method="integrated", steps=32)
    total = float(found.cells.sum() + found.model_level.sum())
    exact = grafter.last_logits(ids, grafts=Graft()).log_softmax(-1)[0, target]
    exact = float(exact - grafter.last_logits(ids).log_softmax(-1)[0, target])
    assert abs(total - exact) < 0.03 * abs(exact) + 1e-3
    assert torch.isfinite(found.cells).all()
