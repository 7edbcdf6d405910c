"""A condition's layer set made concrete on a model of a given depth: the authors' bands by their
rule, everything else by the engine's. Below the plan, the record, the controls and the chunk
methods, which all read it (so none of them imports the plan package)."""

from __future__ import annotations

from weightgraft.engine.graft import Graft
from weightgraft.experiments.conditions.paper_atoms import AUTHOR_BANDS, author_band


def concrete_layers(spec, num_layers: int) -> list[int]:
    """Concrete layers of a condition's layer set: the authors' bands (`authors_*`) by their
    rule, everything else (engine bands, ints, negatives from the end) by the engine's own
    `Graft.layer_indices`."""
    if isinstance(spec, str) and spec in AUTHOR_BANDS:
        return author_band(spec, num_layers)
    return Graft(layers=spec).layer_indices(num_layers)


def engine_layers(spec, num_layers: int):
    """What a Graft takes: `all` stays `all` (so model-level components follow the engine's
    rule for groups), anything else becomes its concrete layer list."""
    return "all" if spec == "all" else concrete_layers(spec, num_layers)
