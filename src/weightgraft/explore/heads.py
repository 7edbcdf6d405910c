"""Attention heads as a finer level of the grid's O and ATTN columns.

A head cell is one head of one column at one position. O's head h is `o` narrowed to head h (what
head h writes into the residual stream). ATTN's head h is query head h: `q` head h and the
key-value head it reads, `k` and `v` head h // (query heads per key-value head). On a
grouped-query model that key-value head is shared with the other query heads of its group, so
ATTN's heads of one group are not independent there (the page says so); O's heads always are.
Head cells become `Graft(..., heads=...)`, the library's own narrowing, so the page's numbers are
what the Python it shows computes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from weightgraft.engine.graft import Graft
from weightgraft.engine.units import UnitError

HEAD_GROUPS = ("ATTN", "O")


@dataclass(frozen=True)
class HeadCounts:
    """Query heads (q, o) and key-value heads (k, v) of a model."""

    query: int
    kv: int
    # The groups whose every component has heads (multi-latent attention's ATTN has chains and a
    # shared latent, which have none: only its O has heads).
    groups: tuple[str, ...] = HEAD_GROUPS

    def kv_of(self, head: int) -> int:
        """The key-value head query head `head` reads."""
        return head // (self.query // self.kv)

    def describe(self) -> dict:
        return {"query": self.query, "kv": self.kv, "groups": {g: self.query for g in self.groups}}


def head_counts(grafter) -> HeadCounts | None:
    """The grafter's head counts, or None when its model cannot tell heads apart (no head
    counts in its config, or no q and o with heads): the page then offers no heads."""
    try:
        units = grafter.units
    except (UnitError, KeyError, AttributeError):
        return None
    query = units.get("o") or units.get("q")
    kv = units.get("k") or units.get("v")
    if query is None or query.count < 2:
        return None
    kv_count = kv.count if kv is not None else query.count
    if kv_count < 1 or query.count % kv_count:
        return None
    attn = [c for c in grafter.components if c in ("q", "k", "v", "kv_latent")]
    groups = tuple(g for g in HEAD_GROUPS if g == "O" or all(c in units for c in attn))
    return HeadCounts(query.count, kv_count, groups)


def head_units(group: str, head: int, members: Sequence[str], counts: HeadCounts) -> dict[str, int]:
    """Component -> the head of it that a head cell of `group` grafts."""
    if group == "O":
        return {c: head for c in members}
    return {c: head if c == "q" else counts.kv_of(head) for c in members}


def check_head(group: str, head: int, counts: HeadCounts | None, where: str) -> str | None:
    """Why a head cell is not on the grid (None when it is)."""
    if counts is None:
        return f"this model's heads cannot be told apart (its config gives no head counts), so {group} has no heads"
    if group not in HEAD_GROUPS:
        return f"group {group} has no heads; heads refine {' and '.join(HEAD_GROUPS)}"
    if group not in counts.groups:
        return (
            f"this model's {group} has no heads: some of its components are computed by several modules (a "
            "chain, as multi-latent attention's q, k and latent), which graft whole; O has heads"
        )
    if not 0 <= head < counts.query:
        return (
            f"head {head} of {group}{where} is out of range: this model has {counts.query} query heads "
            f"(0..{counts.query - 1}) and {counts.kv} key-value heads; ATTN and O heads count query heads"
        )
    return None


def head_grafts(
    cells: dict[tuple[str, str, int, int], set[int]],
    members: dict[str, Sequence[str]],
    counts: HeadCounts,
    order: Sequence[str],
    donors: Sequence[str],
    num_layers: int,
) -> list[Graft]:
    """The Grafts of head cells {(donor, group, layer, head): positions}: per donor and position
    set, the components of one layer narrowed to the same heads become one Graft, and layers
    that share (components, heads) become one Graft over those layers."""
    # (donor, positions, layer) -> component -> heads
    units: dict[tuple[str, tuple[int, ...], int], dict[str, set[int]]] = {}
    by_cell: dict[tuple[str, str, int, tuple[int, ...]], set[int]] = {}
    for (donor, group, layer, head), positions in cells.items():
        if positions:
            by_cell.setdefault((donor, group, layer, tuple(sorted(positions))), set()).add(head)
    for (donor, group, layer, positions), heads in by_cell.items():
        comps = units.setdefault((donor, positions, layer), {})
        for head in heads:
            for comp, unit in head_units(group, head, members[group], counts).items():
                comps.setdefault(comp, set()).add(unit)
    # (donor, positions) -> (components, heads) -> layers
    runs: dict[tuple[str, tuple[int, ...]], dict[tuple[tuple[str, ...], tuple[int, ...]], list[int]]] = {}
    for (donor, positions, layer), comps in sorted(units.items(), key=lambda kv: kv[0][2]):
        same: dict[tuple[int, ...], list[str]] = {}
        for comp in order:
            if comp in comps:
                same.setdefault(tuple(sorted(comps[comp])), []).append(comp)
        for heads, names in same.items():
            runs.setdefault((donor, positions), {}).setdefault((tuple(names), heads), []).append(layer)
    grafts = []
    for donor, positions in sorted(runs, key=lambda k: (donors.index(k[0]), k[1])):
        for (names, heads), layers in runs[(donor, positions)].items():
            spec = "all" if layers == list(range(num_layers)) else layers
            grafts.append(Graft(list(positions), spec, list(names), donor, heads=list(heads)))
    return grafts


def head_values(per_component: dict[str, torch.Tensor], members: dict[str, Sequence[str]], counts: HeadCounts) -> dict:
    """Per head cell, the sum of what its components' heads score: {group: [position][layer][head]}
    from {component: [position, layer, head]} (k and v indexed by key-value head)."""
    out = {}
    kv = [counts.kv_of(h) for h in range(counts.query)]
    for group in HEAD_GROUPS:
        names = members.get(group, ())
        if not names or any(c not in per_component for c in names):
            continue
        out[group] = nested(sum(per_component[c][..., kv] if c in ("k", "v") else per_component[c] for c in names))
    return out


def nested(values: torch.Tensor) -> list:
    """[position, layer, head] as lists for the page, rounded; NaN (not run) as None."""
    return [[[None if v != v else round(v, 6) for v in heads] for heads in layers] for layers in values.tolist()]


def head_attribution(units: dict[str, torch.Tensor], grid, n: int) -> dict | None:
    """The attribution of each head cell (grafted alone, to first order): the sum of its
    components' head units (`Attribution.units`; ATTN's head h: q's unit h with k's and v's unit
    of the key-value head it reads). None without heads."""
    if grid.heads is None or not units:
        return None
    return head_values({c: u[0, :n] for c, u in units.items()}, grid.layer_groups, grid.heads) or None
