"""Single experts as a finer level of the grid's FFN column on a mixture-of-experts model.

On a MoE layer the FFN column is the whole block (router, experts, any shared expert). An expert
cell is one expert of that block at one position: `Graft(..., components=["experts"],
experts=[e])`, the library's own narrowing, so the page's numbers are what the Python it shows
computes. The router is not in it: each token still goes to the experts the recipient's router
picks, with the recipient's weights on them, and expert e computes with the donor's weights where
it is picked. So the experts of a cell, the router and any shared expert together are the whole
block; every expert alone is not (the page says so).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from weightgraft.engine.graft import Graft
from weightgraft.engine.units import UnitError
from weightgraft.explore.heads import nested

EXPERT_GROUP = "FFN"
EXPERT_COMPONENT = "experts"


def expert_count(grafter) -> int | None:
    """Experts per MoE block of the grafter's model, or None on a dense model (or one whose
    experts are not held per expert): the page then offers no experts."""
    try:
        spec = grafter.units.get(EXPERT_COMPONENT)
    except (UnitError, KeyError, AttributeError):
        return None
    return spec.count if spec is not None and spec.count >= 1 else None


def check_expert(group: str, expert: int, count: int | None, where: str) -> str | None:
    """Why an expert cell is not on the grid (None when it is)."""
    if count is None:
        return (
            f"this model has no mixture-of-experts blocks (or none whose experts are held per expert), so {group} "
            "has no experts; graft the FFN column whole"
        )
    if group != EXPERT_GROUP:
        return f"group {group} has no experts; experts refine {EXPERT_GROUP} on a mixture-of-experts model"
    if not 0 <= expert < count:
        return (
            f"expert {expert} of {group}{where} is out of range: this model's MoE blocks have {count} experts "
            f"(0..{count - 1}); pick an expert in that range"
        )
    return None


def expert_grafts(cells: dict[tuple[str, int, int], set[int]], donors: Sequence[str], num_layers: int) -> list[Graft]:
    """The Grafts of expert cells {(donor, layer, expert): positions}: per donor and position set,
    the experts of one layer become one Graft, and layers with the same experts one Graft over
    those layers."""
    by_cell: dict[tuple[str, tuple[int, ...], int], set[int]] = {}
    for (donor, layer, expert), positions in cells.items():
        if positions:
            by_cell.setdefault((donor, tuple(sorted(positions)), layer), set()).add(expert)
    runs: dict[tuple[str, tuple[int, ...]], dict[tuple[int, ...], list[int]]] = {}
    for (donor, positions, layer), experts in sorted(by_cell.items(), key=lambda kv: kv[0][2]):
        runs.setdefault((donor, positions), {}).setdefault(tuple(sorted(experts)), []).append(layer)
    grafts = []
    for donor, positions in sorted(runs, key=lambda k: (donors.index(k[0]), k[1])):
        for experts, layers in runs[(donor, positions)].items():
            spec = "all" if layers == list(range(num_layers)) else layers
            grafts.append(Graft(list(positions), spec, [EXPERT_COMPONENT], donor, experts=list(experts)))
    return grafts


def expert_attribution(units: dict[str, torch.Tensor], n: int) -> dict | None:
    """The attribution of each expert cell (grafted alone, to first order): `experts`' unit e of
    `attribute(grain="expert")`, {"FFN": [position][layer][expert]}; None without experts."""
    if EXPERT_COMPONENT not in units:
        return None
    return {EXPERT_GROUP: nested(units[EXPERT_COMPONENT][0, :n])}
