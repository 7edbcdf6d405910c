"""Plan how rows of a batch share computation through the KV cache.

Two rows whose input ids, attention mask and grafts agree on positions [0, t) have identical
keys, values and logits there, so that stretch needs computing once. A sweep of conditions over
one prompt (PRE, FE, LT, FE+LT, ... or eight last-token component sets) is such a batch: its rows
part ways only where their grafts differ. The planner cuts the sequence into segments; each
segment runs once per distinct history (all rows that agree up to the segment's end) and the
cache is re-indexed from one segment's histories to the next's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# A further segment (one more forward pass) must save this share of the unshared work.
SEGMENT_OVERHEAD = 0.05


@dataclass
class Segment:
    start: int
    end: int
    rows: torch.Tensor  # one representative batch row per distinct history over [0, end)
    row_to_history: torch.Tensor  # for every batch row, its history's index into `rows`
    parent: torch.Tensor | None  # for each history, its index among the previous segment's


def plan_segments(ids: torch.Tensor, mask: torch.Tensor, graft_masks: torch.Tensor) -> list[Segment] | None:
    """Segments that cover [0, seq), or None when sharing saves too little to bother."""
    batch, seq = ids.shape
    if batch < 2:
        return None
    history = _histories(ids, mask, graft_masks)  # [batch, seq]: history class after each position
    counts = history.max(0).values + 1  # distinct histories after each position
    if int(counts[-1]) == batch and int(counts[0]) == batch:
        return None  # every row is on its own from the first token
    cuts = _best_cuts(counts.tolist(), overhead=SEGMENT_OVERHEAD * batch * seq)
    unshared = batch * seq
    shared = sum(int(counts[b - 1]) * (b - a) for a, b in zip(cuts, cuts[1:]))
    if shared + SEGMENT_OVERHEAD * unshared * (len(cuts) - 2) >= unshared:
        return None
    segments: list[Segment] = []
    positions = torch.arange(batch, device=ids.device)
    for a, b in zip(cuts, cuts[1:]):
        classes = history[:, b - 1]
        n = int(counts[b - 1])
        rows = torch.full((n,), batch, device=ids.device).scatter_reduce(0, classes, positions, reduce="amin")
        parent = history[rows, a - 1] if a > 0 else None
        segments.append(Segment(a, b, rows, classes, parent))
    return segments


def _histories(ids: torch.Tensor, mask: torch.Tensor, graft_masks: torch.Tensor) -> torch.Tensor:
    """Class of each row's history [0, t] for every t: equal classes mean identical computation."""
    batch, seq = ids.shape
    columns = torch.cat([ids[..., None], mask[..., None], graft_masks.permute(1, 2, 0).long()], dim=-1)
    _, code = torch.unique(columns.reshape(batch * seq, -1), dim=0, return_inverse=True)
    code = code.reshape(batch, seq)
    history = torch.empty_like(code)
    previous = torch.zeros(batch, dtype=code.dtype, device=code.device)
    for t in range(seq):
        _, previous = torch.unique(torch.stack([previous, code[:, t]], dim=1), dim=0, return_inverse=True)
        history[:, t] = previous
    return history


def _best_cuts(counts: list[int], overhead: float) -> list[int]:
    """Segment boundaries minimising rows x tokens computed plus a cost per forward pass.

    Only positions where histories split are worth cutting at. A small dynamic programme over
    them (there are few: one per place where some conditions start to differ).
    """
    seq = len(counts)
    candidates = [0] + [t for t in range(1, seq) if counts[t] > counts[t - 1]]
    ends = candidates[1:] + [seq]
    best: dict[int, tuple[float, int]] = {seq: (0.0, seq)}
    for a in reversed(candidates):
        best[a] = min((counts[b - 1] * (b - a) + overhead + best[b][0], b) for b in ends if b > a)
    cuts, a = [0], 0
    while a < seq:
        a = best[a][1]
        cuts.append(a)
    return cuts
