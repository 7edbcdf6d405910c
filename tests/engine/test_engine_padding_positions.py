"""Position ids and last-token indices of padded rows: the one definition every forward over a
padded batch uses (the grafter, the activation cache, attribution, self-replay), checked against
a row-by-row count."""

from __future__ import annotations

import random

import torch

from weightgraft.engine.inputs import last_real_index, position_ids


def _random_masks(seed: int, rows: int = 12, width: int = 9) -> torch.Tensor:
    """Rows padded on the left, on the right, or not at all, each with at least one real token."""
    rng = random.Random(seed)
    masks = []
    for _ in range(rows):
        real = rng.randint(1, width)
        pad = [0] * (width - real)
        masks.append(pad + [1] * real if rng.random() < 0.5 else [1] * real + pad)
    return torch.tensor(masks)


def test_real_tokens_count_from_zero_in_every_row():
    mask = _random_masks(0)
    got = position_ids(mask)
    for row, flags in zip(got.tolist(), mask.tolist()):
        real = [p for p, f in zip(row, flags) if f]
        assert real == list(range(len(real)))
        assert min(row) == 0  # padding never takes a negative position (an embedding index)


def test_last_real_index_is_the_rows_last_one():
    mask = _random_masks(1)
    got = last_real_index(mask).tolist()
    want = [max(i for i, f in enumerate(flags) if f) for flags in mask.tolist()]
    assert got == want


def test_a_boolean_or_float_mask_reads_as_its_integer_self():
    mask = _random_masks(2)
    for other in (mask.bool(), mask.float()):
        assert torch.equal(position_ids(other), position_ids(mask))
        assert torch.equal(last_real_index(other), last_real_index(mask))
