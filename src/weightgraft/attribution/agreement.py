"""How well attribution ranks cells: Spearman correlation with each cell's exact graft effect.

On a set of prompts, every cell at the chosen roles' positions (every layer and component) is
grafted alone by the engine; its effect on the target's log-probability is compared with the
gradient and integrated attributions of the same cell. The times of both are recorded too.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from weightgraft.attribution.attribute import attribute
from weightgraft.attribution.exact import exact_cell_effects, spearman
from weightgraft.data.batching import right_pad


def cell_agreement(
    grafter,
    examples: Sequence,
    roles: Sequence[str] = ("FE", "LT"),
    methods: Sequence[str] = ("gradient", "integrated"),
    steps: int = 16,
    donor: str | None = None,
) -> dict:
    """Spearman(attribution, exact single-cell effect) over every cell of `roles`, per method,
    with the seconds each took (exact: the chosen cells only, and extrapolated to every cell)."""
    examples = list(examples)
    ids, mask = right_pad([e.input_ids for e in examples], pad_id=0)
    targets = [e.target_id for e in examples]
    out: dict = {"roles": list(roles), "examples": len(examples)}
    attributions = {}
    for method in methods:
        start = time.perf_counter()
        attributions[method] = attribute(
            grafter, ids, targets, attention_mask=mask, method=method, steps=steps, donor=donor
        )
        out[f"seconds_attribute_{method}"] = time.perf_counter() - start
    first = next(iter(attributions.values()))
    cells = []
    for b, example in enumerate(examples):
        for role in roles:
            for position in example.roles.get(role, []):
                cells += [(b, position, None, c) for c in first.model_components]
                cells += [
                    (b, position, layer, c) for layer in range(first.cells.shape[2]) for c in first.layer_components
                ]
    if len(cells) < 2:
        raise ValueError(f"the examples have fewer than two cells at roles {list(roles)}")
    start = time.perf_counter()
    exact = exact_cell_effects(grafter, ids, targets, cells, attention_mask=mask, donor=donor).numpy()
    seconds_exact = time.perf_counter() - start
    all_cells = sum(first.lengths) * (first.cells.shape[2] * first.cells.shape[3] + first.model_level.shape[2])
    out.update(
        cells=len(cells),
        seconds_exact_chosen_cells=seconds_exact,
        seconds_exact_all_cells_estimated=seconds_exact * all_cells / len(cells),
        all_cells=all_cells,
    )
    for method, attr in attributions.items():
        values = np.array([_value(attr, cell) for cell in cells])
        out[f"spearman_{method}"] = spearman(values, exact)
        for role in roles:
            chosen = [i for i, (b, p, _, _) in enumerate(cells) if p in examples[b].roles.get(role, [])]
            if len(chosen) >= 2:
                out[f"spearman_{method}_{role}"] = spearman(values[chosen], exact[chosen])
    return out


def _value(attr, cell) -> float:
    b, position, layer, component = cell
    if layer is None:
        return float(attr.model_level[b, position, attr.model_components.index(component)])
    return float(attr.cells[b, position, layer, attr.layer_components.index(component)])
