"""The comparison table: the target's scores under the recipient, each donor alone, the current
graft and any pinned grafts, side by side, as the paper measures a condition.

Each column is one row of a batch: the prompt followed by the target's tokens but the last,
teacher-forced (as the runner scores a whole target: `experiments.metrics.score_rows`); the
tokens after the grid's last row get that row's cells, as the runner gives them the last prompt
token's grafts. First token: p, rank, log p and its change from the recipient, the logit difference
against a competing answer; whole target: the sum of its tokens' log-probabilities; and the
recovery of each donor's gain, (p_graft - p_recipient) / (p_donor - p_recipient), undefined (None)
where the donor raises p by less than MIN_GAIN: on one prompt a gain of 1e-4 would make any
graft's change look like hundreds of times the donor's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from weightgraft.engine.graft import Graft
from weightgraft.experiments.metrics import score_rows
from weightgraft.explore.grid import Cells

MAX_PINS = 64  # pinned grafts in one comparison


@dataclass(frozen=True)
class Pin:
    """A pinned graft: its label (the page's) and its cells."""

    label: str
    cells: tuple[Cells, ...]


def extend_cells(cells: Sequence[Cells], num_tokens: int, total: int) -> list[Cells]:
    """The cells over a row of `total` tokens: teacher-forced tokens after the grid's `num_tokens`
    get the cells of its last row."""
    tail = tuple(range(num_tokens, total))
    return [replace(c, positions=c.positions + tail) if num_tokens - 1 in c.positions else c for c in cells]


def score_columns(
    logits: torch.Tensor, target_ids: list[int], scored: int, rival_id: int | None
) -> list[dict[str, float | int | None]]:
    """Scores of each row of `logits` [rows, len(target_ids), vocab] (the steps that score the
    target's tokens)."""
    rows = logits.shape[0]
    scores = score_rows(logits, [0] * rows, [target_ids] * rows, [scored] * rows)
    step = logits[:, scored].float()
    logp = torch.log_softmax(step, -1)[:, target_ids[scored]]
    diff = None if rival_id is None else (step[:, target_ids[scored]] - step[:, rival_id]).tolist()
    return [
        {
            "prob": s.prob,
            "rank": s.rank,
            "logprob": float(logp[i]),
            "logit_diff": None if diff is None else float(diff[i]),
            "target_logprob": s.target_logprob,
        }
        for i, s in enumerate(scores)
    ]


MIN_GAIN = 0.01  # the donor's gain in p (one percentage point) below which recovery is not shown


def recovery(p: float, p_recipient: float, p_donor: float) -> float | None:
    """The share of the donor's gain in p that a graft recovers; None where the donor gains less
    than MIN_GAIN."""
    gain = p_donor - p_recipient
    return (p - p_recipient) / gain if gain >= MIN_GAIN else None


def with_changes(columns: list[dict], donors: Sequence[str], sources: Sequence[set[str]]) -> list[dict]:
    """Each column with its change from the recipient (the first column) and its recovery of the
    gain of each donor it grafts from (`sources`, per column); None for any other donor: a graft
    from sft recovers none of b2a's gain, whatever the numbers' ratio (the donors' columns follow
    the recipient's, in `donors`' order)."""
    base = columns[0]
    donor_p = {d: columns[1 + i]["prob"] for i, d in enumerate(donors)}
    return [
        {
            **c,
            "delta_logprob": c["logprob"] - base["logprob"],
            "delta_target_logprob": c["target_logprob"] - base["target_logprob"],
            "recovery": {d: recovery(c["prob"], base["prob"], p) if d in used else None for d, p in donor_p.items()},
        }
        for c, used in zip(columns, sources)
    ]


def graft_donors(grafts: Sequence[Graft] | None) -> set[str]:
    """The donors a column's grafts take weights from (none for the recipient's)."""
    return {g.donor for g in grafts or ()}
