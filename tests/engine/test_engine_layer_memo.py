"""The layer memo (`Grafter.remember_layers`): a click-by-click series of grafts gives logits equal
bit for bit to a Grafter that keeps nothing, on every architecture, while the layers below a
changed cell are taken from the memo."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import num_layers_of, pair, random_prompt, random_specs, stable_seed, to_grafts
from tiny_model_fixtures import ARCHS


def _clicks(rng: random.Random, config, n: int, count: int) -> list:
    """A session: random graft sets, and each followed by one with a late layer changed."""
    layers = num_layers_of(config)
    out = []
    for _ in range(count):
        specs = random_specs(rng, config, n)
        specs = [] if specs is None else [specs] if not isinstance(specs, list) else specs
        out.append(to_grafts(specs) or None)
        late = rng.randrange(layers // 2, layers)
        out.append(to_grafts([*specs, _late(rng, n, late)]))
    return out


def _late(rng: random.Random, n: int, layer: int):
    from reference_grafter import GraftSpec

    return GraftSpec([rng.randrange(n)], [layer], rng.choice(["o", "mlp", "attn"]))


@pytest.mark.parametrize("arch", ARCHS)
def test_remembered_layers_give_the_same_logits_bit_for_bit(arch):
    from weightgraft import Grafter

    recipient, donor = pair(arch)
    plain, memo = Grafter(recipient, donor), Grafter(recipient, donor)
    memo.remember_layers(calls=4)
    rng = random.Random(stable_seed("memo", arch))
    n = 9
    ids = torch.tensor([random_prompt(rng, n)])
    for grafts in _clicks(rng, recipient.config, n, 6):
        expected = plain.logits(ids, grafts=grafts, logits_to_keep=2)
        assert torch.equal(memo.logits(ids, grafts=grafts, logits_to_keep=2), expected)
    assert memo._layer_memo.reused_layers > 0  # the late-layer clicks reused the layers below


def test_the_memo_keys_on_tokens_heads_and_threads():
    """Another prompt, other heads at the same cells, or another thread count reuse nothing that
    depends on them: each result equals a fresh Grafter's, and the counts say what was reused."""
    from weightgraft import Graft, Grafter

    recipient, donor = pair("llama")
    memo = Grafter(recipient, donor)
    memo.remember_layers()
    plain = Grafter(recipient, donor)
    layers = num_layers_of(recipient.config)
    ids = torch.tensor([[5, 9, 13, 17, 21, 25]])
    first = [Graft("last", [layers - 1], "o", heads=[0])]
    memo.logits(ids, grafts=first)
    reused = memo._layer_memo.reused_layers
    memo.logits(ids, grafts=first)  # the same pass again: every layer from the memo
    assert memo._layer_memo.reused_layers - reused == layers
    reused = memo._layer_memo.reused_layers
    other_heads = [Graft("last", [layers - 1], "o", heads=[1])]
    assert torch.equal(memo.logits(ids, grafts=other_heads), plain.logits(ids, grafts=other_heads))
    assert memo._layer_memo.reused_layers - reused == layers - 1  # all but the changed layer
    reused = memo._layer_memo.reused_layers
    other_ids = torch.tensor([[5, 9, 13, 17, 21, 26]])
    assert torch.equal(memo.logits(other_ids, grafts=first), plain.logits(other_ids, grafts=first))
    assert memo._layer_memo.reused_layers == reused
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads != 1 else 2)
        memo.logits(ids, grafts=first)
        assert memo._layer_memo.reused_layers == reused
    finally:
        torch.set_num_threads(threads)


def test_generation_runs_in_full_and_batches_stay_exact():
    """Generation does not use the memo; a batch of rows (cut into shared-prefix segments or
    not) gives the same logits with it as without, however often it is run."""
    from weightgraft import Graft, Grafter

    recipient, donor = pair("llama")
    memo, plain = Grafter(recipient, donor), Grafter(recipient, donor)
    memo.remember_layers()
    ids = torch.tensor([[5, 9, 13, 17, 21, 25]])
    graft = Graft("last", "all", "o")
    made = memo.generate(ids, grafts=graft, max_new_tokens=3, do_sample=False)
    assert torch.equal(made, plain.generate(ids, grafts=graft, max_new_tokens=3, do_sample=False))
    assert memo._layer_memo.reused_layers == 0
    batch = ids.expand(4, -1)
    rows = [None, [graft], [Graft([2], "all", "mlp")], [Graft("last", [0], "q")]]
    for _ in range(2):
        assert torch.equal(memo.logits(batch, row_grafts=rows), plain.logits(batch, row_grafts=rows))
