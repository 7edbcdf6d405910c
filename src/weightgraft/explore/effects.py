"""The exact effect map: every cell of the grid grafted alone, for real, and every cell of the
current graft left out of it, each a row of one batched engine pass.

The attribution map is a first-order estimate (one gradient, or a few along a path); this is
what it estimates. A cell's effect is the change in the target's log-probability at the scoring
step. Cells whose result is known without a pass are not run: a column whose donor weights equal
the recipient's bit for bit changes nothing, and the final norm and unembedding change the scored
logits only at the scoring position (0 elsewhere, exactly).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

import torch

from weightgraft.engine.grafter import Grafter
from weightgraft.explore.experts import EXPERT_GROUP
from weightgraft.explore.grid import Cells, Column, Grid
from weightgraft.explore.heads import HEAD_GROUPS

ROWS_PER_PASS = 64  # grafted rows per engine call: the rows of one prompt share its prefix
Running = Callable[[], AbstractContextManager]


@dataclass
class EffectMap:
    """[positions, columns] effects (target log-probability change) and which were run."""

    values: torch.Tensor
    ran: torch.Tensor  # bool: False where the value is known to be 0 without a pass
    rows: int  # rows the engine ran


def _target_logprobs(
    grafter: Grafter, ids: list[int], target: int, rows: Sequence[list | None], running: Running = nullcontext
) -> torch.Tensor:
    """The target's log-probability at the last position under each row's grafts. Each pass of
    ROWS_PER_PASS rows runs inside its own `running()` (the explorer's model lock), so that a
    click waits for one pass, not for the whole map; `running` may also refuse to go on."""
    out = []
    tensor = torch.tensor([ids])
    for start in range(0, len(rows), ROWS_PER_PASS):
        chunk = list(rows[start : start + ROWS_PER_PASS])
        with running():
            logits = grafter.last_logits(tensor.expand(len(chunk), -1), row_grafts=chunk)
        out.append(torch.log_softmax(logits.float(), -1)[:, target])
    return torch.cat(out) if out else torch.zeros(0)


def _is_zero(grid: Grid, column: Column, position: int, n: int, identical: set[tuple]) -> bool:
    """A cell whose graft cannot move the scored logits (see the module's docstring)."""
    return (column.group, column.layer) in identical or (column.group in ("FNORM", "UNEMB") and position != n - 1)


def single_cell_effects(
    grafter: Grafter,
    grid: Grid,
    ids: list[int],
    target: int,
    donor: str,
    identical: set[tuple],
    running: Running = nullcontext,
) -> EffectMap:
    """logp(cell grafted alone from `donor`) - logp(recipient), for every cell of the grid;
    `identical`: the (group, layer) columns where `donor` equals the recipient."""
    n = len(ids)
    cells = [
        (p, j) for p in range(n) for j, column in enumerate(grid.columns) if not _is_zero(grid, column, p, n, identical)
    ]
    rows: list[list | None] = [None]
    for p, j in cells:
        column = grid.columns[j]
        rows.append(grid.to_grafts([Cells(donor, column.group, column.layer, (p,))]))
    logprobs = _target_logprobs(grafter, ids, target, rows, running)
    values = torch.zeros(n, len(grid.columns))
    ran = torch.zeros(n, len(grid.columns), dtype=torch.bool)
    for (p, j), value in zip(cells, logprobs[1:] - logprobs[0]):
        values[p, j] = value
        ran[p, j] = True
    return EffectMap(values, ran, len(rows))


def single_head_effects(
    grafter: Grafter,
    grid: Grid,
    ids: list[int],
    target: int,
    donor: str,
    identical: set[tuple],
    layers: Sequence[int],
    running: Running = nullcontext,
) -> tuple[dict[str, torch.Tensor], int]:
    """logp(head cell grafted alone from `donor`) - logp(recipient) for every head of O and ATTN
    at `layers` (those the page has split), {group: [position, layer, head]}, NaN at other layers;
    and the rows run."""
    groups = [g for g in HEAD_GROUPS if g in grid.layer_groups and g in grid.heads.groups]
    return _single_unit_effects(
        grafter, grid, ids, target, donor, identical, layers, running, groups, grid.heads.query, "head"
    )


def single_expert_effects(
    grafter: Grafter,
    grid: Grid,
    ids: list[int],
    target: int,
    donor: str,
    identical: set[tuple],
    layers: Sequence[int],
    running: Running = nullcontext,
) -> tuple[torch.Tensor, int]:
    """logp(expert cell grafted alone from `donor`) - logp(recipient) for every expert of FFN at
    `layers` (those the page has split), [position, layer, expert], NaN at other layers; and the
    rows run. The router stays the recipient's in each (`explore.experts`)."""
    out, rows = _single_unit_effects(
        grafter, grid, ids, target, donor, identical, layers, running, [EXPERT_GROUP], grid.experts, "expert"
    )
    return out[EXPERT_GROUP], rows


def _single_unit_effects(
    grafter: Grafter,
    grid: Grid,
    ids: list[int],
    target: int,
    donor: str,
    identical: set[tuple],
    layers: Sequence[int],
    running: Running,
    groups: Sequence[str],
    count: int,
    unit: str,
) -> tuple[dict[str, torch.Tensor], int]:
    """Each of `count` units (the `Cells` field `unit`: "head" or "expert") of `groups` at
    `layers` grafted alone at each position: {group: [position, layer, unit]}, NaN at other
    layers, 0 where the column is identical in `donor`; and the rows run."""
    n = len(ids)
    out = {g: torch.full((n, grid.num_layers, count), float("nan")) for g in groups}
    cells = []
    for g, layer in ((g, layer) for g in groups for layer in layers):
        if (g, layer) in identical:
            out[g][:, layer] = 0.0
        else:
            cells += [(g, layer, u, p) for u in range(count) for p in range(n)]
    rows: list[list | None] = [None]
    rows += [grid.to_grafts([Cells(donor, g, layer, (p,), **{unit: u})]) for g, layer, u, p in cells]
    logprobs = _target_logprobs(grafter, ids, target, rows, running)
    for (g, layer, u, p), value in zip(cells, logprobs[1:] - logprobs[0]):
        out[g][p, layer, u] = value
    return out, len(rows)


def _split(cells: Sequence[Cells]) -> list[tuple[Cells, int]]:
    """The current graft as single cells: (its column's Cells, one position)."""
    return [(c, p) for c in cells for p in sorted(set(c.positions))]


def _without(cells: Sequence[Cells], left_out: tuple[Cells, int]) -> list[Cells]:
    column, position = left_out
    out = []
    for c in cells:
        if replace(c, positions=()) == replace(column, positions=()):  # the same column, head or expert
            c = replace(c, positions=tuple(p for p in c.positions if p != position))
        if c.positions:
            out.append(c)
    return out


def leave_one_out_effects(
    grafter: Grafter, grid: Grid, ids: list[int], target: int, cells: Sequence[Cells], running: Running = nullcontext
) -> dict:
    """logp(current graft) - logp(current graft without the cell), for each cell of the graft:
    what that cell adds given all the others, largest |effect| first (cells of one column and
    position from two donors cannot occur: the grid refuses them)."""
    singles = _split(cells)
    rows = [grid.to_grafts(list(cells)) or None] + [grid.to_grafts(_without(cells, s)) or None for s in singles]
    logprobs = _target_logprobs(grafter, ids, target, rows, running)
    column_index = {(c.group, c.layer): j for j, c in enumerate(grid.columns)}
    effects = [
        {
            "donor": c.donor,
            "position": p,
            "column": column_index[(c.group, c.layer)],
            "head": c.head,
            "expert": c.expert,
            "effect": float(logprobs[0] - value),
        }
        for (c, p), value in zip(singles, logprobs[1:])
    ]
    effects.sort(key=lambda e: -abs(e["effect"]))  # the largest first: a 30-layer graft has hundreds
    return {"current_logprob": float(logprobs[0]), "cells": effects, "rows": len(rows)}


def agreement(estimate: torch.Tensor, exact: torch.Tensor, ran: torch.Tensor) -> dict:
    """How far a first-order map is from the exact one, over the cells that were run: the largest
    and the mean absolute error, and the Pearson correlation (None when either side is constant)."""
    a, b = estimate[ran].double(), exact[ran].double()
    if a.numel() == 0:
        return {"cells": 0, "max_abs_error": 0.0, "mean_abs_error": 0.0, "correlation": None}
    error = (a - b).abs()
    correlation = None
    if a.numel() > 1 and a.std() > 0 and b.std() > 0:
        correlation = float(torch.corrcoef(torch.stack([a, b]))[0, 1])
    return {
        "cells": int(a.numel()),
        "max_abs_error": float(error.max()),
        "mean_abs_error": float(error.mean()),
        "correlation": correlation,
    }
