"""Layer bands: the names a graft's `layers` may take, and the check of a layer set as written.

The engine's bands split n layers as band k of m = [k*n//m, (k+1)*n//m). The authors' code used
q = n // 4 and quarters [0,q), [q,2q), [2q,3q), [3q,n): the fourth quarter takes the remainder
(Gemma's 18 layers: 12..17, where the engine's last_quarter is 13..17). Presets use the authors'
bands, named `authors_*` (`paper_atoms`). Which layers a band is on one model is the plan's
business (`layers.concrete_layers`).
"""

from __future__ import annotations

from weightgraft.engine.graft import BANDS
from weightgraft.experiments.conditions.paper_atoms import AUTHOR_BANDS

LayerSpec = str | int | list[int]
LAYER_BANDS = ("all", *BANDS, *AUTHOR_BANDS)


def check_layer_spec(value: LayerSpec) -> LayerSpec:
    """A layer set as written (a known band name, or layer numbers); whether it fits a model's
    depth is the plan's check (`plan.build.conditions_on_model`)."""
    if isinstance(value, str) and value not in LAYER_BANDS:
        raise ValueError(f"unknown layer band {value!r}; known: {', '.join(LAYER_BANDS)}")
    if isinstance(value, list) and not value:
        raise ValueError("layers: [] names no layer, so the graft would change nothing; name layers, a band or all")
    return value
