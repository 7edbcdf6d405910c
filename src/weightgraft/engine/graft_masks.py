"""Where each donor's (layer, component) keys are grafted in one call of a `Grafter`: the
masks, their classes of equal masks (so per-mask work is done once per class), and the two rules
on them (grafts meeting at a position unite their units; one donor per position and key)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from weightgraft.engine.graft import Graft, Key, as_graft_list

# A partial key of one call: (donor index, key index, the heads or neurons grafted there).
Partial = tuple[int, int, frozenset]


@dataclass
class GraftMasks:
    """Where each donor's (layer, component) keys are grafted in one call.

    Index d * num_keys + k of `masks` is key k from donor d, grafted whole. The masks after those,
    one per entry of `partials`, say where a key is grafted for some of its heads or neurons only.
    Keys of one class have equal masks (class -1: grafted nowhere), so per-mask work is done once
    per class.
    """

    masks: torch.Tensor  # bool [num_donors * num_keys + len(partials), batch, seq], on the model's device
    classes: list[int]
    partials: list[Partial] = field(default_factory=list)

    def chunk(self, rows: torch.Tensor, start: int, end: int) -> GraftMasks:
        """The masks of some rows over positions [start, end); equal masks stay equal."""
        return GraftMasks(self.masks[:, rows, start:end], self.classes, self.partials)

    def last_column(self) -> GraftMasks:
        return GraftMasks(self.masks[:, :, -1:], self.classes, self.partials)

    def nothing_at_last_column(self) -> GraftMasks:
        return GraftMasks(torch.zeros_like(self.masks[:, :, -1:]), [-1] * len(self.classes), self.partials)


def mask_classes(masks: torch.Tensor) -> list[int]:
    """For each key's [batch, seq] mask (on the CPU), a class shared by exactly the equal masks;
    -1 for masks with nothing grafted. Hashing packed bytes costs a few ms for 300 keys x 32k tokens."""
    packed = np.packbits(masks.flatten(1).numpy(), axis=1)
    grafted = masks.flatten(1).any(-1).tolist()
    seen: dict[bytes, int] = {}
    return [seen.setdefault(row.tobytes(), len(seen)) if on else -1 for row, on in zip(packed, grafted)]


def row_graft_lists(grafts, row_grafts, batch: int) -> list[list[Graft]]:
    """Each row's grafts: `grafts` for every row, or `row_grafts` one entry per row."""
    if grafts is not None and row_grafts is not None:
        raise ValueError("pass either grafts (for every row) or row_grafts (one entry per row), not both")
    if row_grafts is None:
        return [as_graft_list(grafts)] * batch
    if len(row_grafts) != batch:
        raise ValueError(f"row_grafts has {len(row_grafts)} entries for a batch of {batch} rows")
    return [as_graft_list(g) for g in row_grafts]


def resolve_partials(
    partial: dict[tuple[int, int], dict[frozenset, torch.Tensor]],
    whole: torch.Tensor,
    num_keys: int,
    unit_count: Callable[[int], int],
) -> tuple[list[Partial], list[torch.Tensor]]:
    """One mask per (donor, key, unit set) actually grafted: grafts that meet at a position
    take the union of their units; a union of every unit, or a key also grafted whole there,
    is the whole key (marked in `whole`). `unit_count(k)`: how many units key k has."""
    partials: list[Partial] = []
    masks: list[torch.Tensor] = []
    for (d, k), by_units in partial.items():
        index = d * num_keys + k
        count = unit_count(k)
        combos = unit_unions(by_units)
        for units, where in combos.items():
            if len(units) == count:
                whole[index] |= where
        for units, where in combos.items():
            where = where & ~whole[index]
            if len(units) < count and bool(where.any()):
                partials.append((d, k, units))
                masks.append(where)
    return partials, masks


def refuse_overlaps(
    per_donor: torch.Tensor, real_positions: list[torch.Tensor], keys: Sequence[Key], donor_names: Sequence[str]
) -> None:
    """Two donors for one (row, position, layer, component) would be a silent choice: refuse."""
    clashes = (per_donor.sum(0) > 1).nonzero()
    if clashes.numel() == 0:
        return
    k, b, s = (int(v) for v in clashes[0])
    layer, component = keys[k]
    names = [donor_names[d] for d in per_donor[:, k, b, s].nonzero().flatten().tolist()]
    position = int((real_positions[b] == s).nonzero()[0])
    where = f"layer {layer}, " if layer is not None else ""
    raise ValueError(
        f"grafts of row {b} give position {position} (counting real tokens), {where}component "
        f"{component!r} to more than one donor: {names}"
        f"{f' ({len(clashes) - 1} more such overlaps)' if len(clashes) > 1 else ''}; "
        "each (position, layer, component) of a row can come from one donor only"
    )


def unit_unions(by_units: dict[frozenset, torch.Tensor]) -> dict[frozenset, torch.Tensor]:
    """Where each union of unit sets applies: a position reached by several grafts of one key
    takes the union of their units (usually none are; those few are done one by one)."""
    if len(by_units) == 1:
        return dict(by_units)
    reach = torch.stack(list(by_units.values())).sum(0)
    combos = {units: where & (reach == 1) for units, where in by_units.items()}
    for b, s in (reach > 1).nonzero().tolist():
        union = frozenset().union(*(units for units, where in by_units.items() if where[b, s]))
        combos.setdefault(union, torch.zeros_like(reach, dtype=torch.bool))[b, s] = True
    return combos
