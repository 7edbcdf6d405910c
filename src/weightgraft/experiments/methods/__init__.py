"""The two ways a run computes a chunk, behind one contract (`chunk_method.ChunkMethod`):
weight grafting through the engine (`weight_grafting`) and activation patching
(`activation_patching`)."""

from __future__ import annotations

from weightgraft.experiments.conditions import Condition, ConditionMethod
from weightgraft.experiments.methods.activation_patching import ActivationPatching
from weightgraft.experiments.methods.chunk_method import ChunkMethod, LoadedModels, Row
from weightgraft.experiments.methods.weight_grafting import WeightGrafting, engine_graft

__all__ = ["ActivationPatching", "ChunkMethod", "LoadedModels", "Row", "WeightGrafting", "engine_graft", "method_for"]


def method_for(
    resources: LoadedModels, condition: Condition, tied: bool, pad: int, donors: tuple[str, ...] | None = None
) -> ChunkMethod:
    """The method computing `condition`'s chunk, on the run's models (loaded on first use).

    tied: the recipient's unembedding is its token embedding (from the plan); pad: the padding
    token id; donors: the Grafter's donor names for the whole chunk (default: the condition's
    `donor_sources`; a chunk whose conditions differ only in shape reads several shaped donors
    of one model in one pass)."""
    device = resources.config.device
    if condition.method == ConditionMethod.WEIGHTS:
        donors = donors or condition.donor_sources
        grafter = resources.grafter(condition.recipient, donors)
        return WeightGrafting(grafter, donors, tied, pad, device)
    return ActivationPatching(resources.model(condition.recipient), resources.model(condition.donor), pad, device)
