"""Exact single-cell effects (the engine grafting one cell at a time) and rank agreement.

This is the ground truth attribution approximates: one grafted row per cell, so its cost grows
with the number of cells, where `attribute` costs a fixed number of passes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from weightgraft.engine.graft import Graft

# (row, real position, layer or None for a model-level component, component)
Cell = tuple[int, int, "int | None", str]


def cell_graft(position: int, layer: int | None, component: str, donor: str | None = None) -> Graft:
    """The graft of one cell (model-level components ignore the layer)."""
    return Graft(positions=[position], layers=[0 if layer is None else layer], components=[component], donor=donor)


def exact_cell_effects(
    grafter,
    input_ids: torch.Tensor,
    targets: torch.Tensor | Sequence[int],
    cells: Sequence[Cell],
    attention_mask: torch.Tensor | None = None,
    metric: str = "logprob",
    rows_per_pass: int = 64,
    donor: str | None = None,
) -> torch.Tensor:
    """metric(cell grafted alone) - metric(recipient) for each cell, by the engine.

    Rows of one prompt sit side by side, so the engine's prefix sharing computes their common
    stretch (everything before the grafted position) once."""
    if metric not in ("logprob", "prob"):
        raise ValueError(f"metric must be 'logprob' or 'prob', not {metric!r}")
    ids = torch.as_tensor(input_ids)
    ids = ids[None] if ids.dim() == 1 else ids
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask)
    mask = mask[None] if mask.dim() == 1 else mask
    target = torch.as_tensor(targets).long().reshape(-1)
    base = _metric(grafter.last_logits(ids, attention_mask=mask), target, metric)
    order = sorted(range(len(cells)), key=lambda i: (cells[i][0], cells[i][1]))
    out = torch.empty(len(cells), dtype=base.dtype)
    for start in range(0, len(order), rows_per_pass):
        chunk = order[start : start + rows_per_pass]
        rows = torch.tensor([cells[i][0] for i in chunk])
        grafts = [cell_graft(*cells[i][1:], donor=donor) for i in chunk]
        logits = grafter.last_logits(ids[rows], row_grafts=grafts, attention_mask=mask[rows])
        out[chunk] = (_metric(logits, target[rows].to(logits.device), metric) - base[rows.to(base.device)]).cpu()
    return out


def _metric(logits: torch.Tensor, target: torch.Tensor, metric: str) -> torch.Tensor:
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    target = target.to(logits.device)
    values = torch.log_softmax(logits, -1) if metric == "logprob" else torch.softmax(logits, -1)
    return values.gather(1, target[:, None])[:, 0]


def spearman(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(f"spearman needs two equal-length 1-d sequences of >= 2 values, got {x.shape} and {y.shape}")
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt((rx**2).sum() * (ry**2).sum())
    return float((rx * ry).sum() / denominator) if denominator > 0 else float("nan")


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype=float)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return (sums / counts)[inverse]
