"""Generation stops at end-of-sequence tokens and pads rows that finished early."""

from __future__ import annotations

import torch

from tiny_model_fixtures import make_pair
from weightgraft import Graft, Grafter


def _grafter() -> Grafter:
    return Grafter(*make_pair("llama", 3, vocab_size=61, num_hidden_layers=2))


def test_eos_stops_a_row_and_later_tokens_are_padding():
    grafter = _grafter()
    torch.manual_seed(0)
    ids = torch.randint(1, 61, (2, 6))
    graft = Graft("last", "all", "mlp")
    free = grafter.generate(ids, grafts=graft, max_new_tokens=6)
    # Pick row 0's third new token as end-of-sequence (not seen earlier in row 0's continuation).
    new0 = free[0, 6:].tolist()
    eos = next(t for i, t in enumerate(new0) if i >= 1 and t not in new0[:i])
    stop = new0.index(eos)
    stopped = grafter.generate(ids, grafts=graft, max_new_tokens=6, eos_token_id=eos, pad_token_id=0)
    assert stopped[0, : 6 + stop + 1].tolist() == free[0, : 6 + stop + 1].tolist()
    assert (stopped[0, 6 + stop + 1 :] == 0).all()
    # Row 1 is unaffected until it meets the same token itself.
    new1 = free[1, 6:].tolist()
    end1 = new1.index(eos) + 1 if eos in new1 else len(new1)
    assert stopped[1, 6 : 6 + end1].tolist() == new1[: min(end1, stopped.shape[1] - 6)]


def test_generation_ends_early_when_every_row_is_done():
    grafter = _grafter()
    ids = torch.randint(1, 61, (1, 5))
    first = int(grafter.generate(ids, max_new_tokens=1)[0, -1])
    out = grafter.generate(ids, max_new_tokens=10, eos_token_id=first)
    assert out.shape == (1, 6)
