"""Token-id batches for causal LMs."""

from __future__ import annotations

from collections.abc import Sequence

import torch

# Rows aligned on one token: the engine's (`Grafter.score` aligns its rows as the runner does).
from weightgraft.engine.inputs import align_on

__all__ = ["align_on", "right_pad"]


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), right-padded: a real token's index in its row is its tensor index."""
    ids, mask, _ = align_on(seqs, [0] * len(seqs), pad_id)  # every row's first token in column 0
    return ids, mask
