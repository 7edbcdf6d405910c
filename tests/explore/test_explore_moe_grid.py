"""On a mixture-of-experts model the explorer's FFN column is the whole MoE block (router, experts
and any shared expert), as the paper's FFN is there (docs/methodology.md): a cell equals the
library's graft of the block, and the reference's."""

from __future__ import annotations

import pytest
import torch

from reference_grafter import GraftSpec, reference_logits
from tiny_model_fixtures import MOE_ARCHS, make_pair
from weightgraft import Graft, Grafter
from weightgraft.explore.grid import Cells, Grid


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_an_ffn_cell_of_a_moe_model_is_the_whole_block(arch):
    recipient, donor = make_pair(arch, 0)
    grafter = Grafter(recipient, donor)
    grid = Grid.of(grafter)
    block = [c for c in grafter.components if c in grafter.adapter.group("mlp")]
    assert grid.layer_groups["FFN"] == block and {"router", "experts"} <= set(block)
    ids = torch.tensor([[3, 17, 42, 8, 99, 5]])
    grafts = grid.to_grafts([Cells("donor", "FFN", 1, (1, 5))])
    got = grafter.logits(ids, grafts=grafts)[0]
    assert torch.equal(got, grafter.logits(ids, grafts=Graft([1, 5], 1, "mlp"))[0])
    want = reference_logits(recipient, donor, ids[0], GraftSpec([1, 5], 1, block))
    assert (got - want).abs().max().item() < 1e-4
    assert (got - grafter.logits(ids)[0]).abs().max().item() > 1e-3  # the block changed something
