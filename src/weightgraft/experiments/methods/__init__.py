"""The two ways a run computes a chunk, behind one contract (`base.ChunkMethod`): weight
grafting through the engine (`weights`) and activation patching (`activations`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from weightgraft.experiments.conditions import Condition
from weightgraft.experiments.methods.activations import ActivationPatching
from weightgraft.experiments.methods.base import ChunkMethod, Row
from weightgraft.experiments.methods.weights import WeightGrafting, engine_graft

if TYPE_CHECKING:
    from weightgraft.experiments.execute import Resources

__all__ = ["ActivationPatching", "ChunkMethod", "Row", "WeightGrafting", "engine_graft", "method_for"]


def method_for(resources: Resources, condition: Condition, tied: bool, pad: int) -> ChunkMethod:
    """The method computing `condition`'s chunk, on the run's models (loaded on first use).

    tied: the recipient's unembedding is its token embedding (from the plan); pad: the padding
    token id."""
    device = resources.config.device
    if condition.method == "weights":
        grafter = resources.grafter(condition.recipient, condition.donors)
        return WeightGrafting(grafter, condition.donors, tied, pad, device)
    return ActivationPatching(resources.model(condition.recipient), resources.model(condition.donor), pad, device)
