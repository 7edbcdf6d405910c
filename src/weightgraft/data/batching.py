"""Token-id batches for causal LMs."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def right_pad(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), right-padded: a real token's index in its row is its tensor index."""
    ids, mask, _ = align_on(seqs, [0] * len(seqs), pad_id)  # every row's first token in column 0
    return ids, mask


def align_on(
    seqs: Sequence[Sequence[int]], anchors: Sequence[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(input_ids, attention_mask, column): each row padded on the left so that its token at index
    `anchors[row]` falls in one `column`, and on the right to a common width.

    The runner aligns rows on the prompt's last token: rows of one prompt part ways there (the
    paper's conditions graft there or earlier), so with the prefix before it in the same columns
    the engine shares it in one segment, and the scored logits are the last columns of every row.
    """
    column = max(anchors)
    width = column + max(len(s) - a for s, a in zip(seqs, anchors))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, (seq, anchor) in enumerate(zip(seqs, anchors)):
        start = column - anchor
        ids[row, start : start + len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, start : start + len(seq)] = 1
    return ids, mask, column
