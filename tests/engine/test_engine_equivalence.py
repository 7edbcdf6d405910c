"""The engine's logits equal the per-token reference of the paper's method, on every architecture."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import (
    ATOL,
    grafter_for,
    max_diff,
    pad_batch,
    pair,
    random_prompt,
    random_specs,
    real_slice,
    reference_rows,
    stable_seed,
    to_grafts,
)
from reference_grafter import (
    GROUPS,
    MODEL_LEVEL,
    GraftSpec,
    leaf_components,
    parameter_slices,
    reference_logits,
    resolve_row,
    static_graft_logits,
    untied_copy,
)
from tiny_model_fixtures import ARCHS, num_layers

SEEDS = [0, 1, 2]


def _describe(rows, specs):
    return "\n".join(f"  row len {len(r)}: {s}" for r, s in zip(rows, specs))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_random_grafts_match_reference(arch, seed):
    """A left-padded batch of rows of different lengths, each with its own random grafts."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed(arch, seed))
    lengths = [rng.randrange(4, 10) for _ in range(3)]
    rows = [random_prompt(rng, n) for n in lengths]
    row_specs = [random_specs(rng, recipient.config, n) for n in lengths]
    ids, mask = pad_batch(rows, "left")
    got = grafter.logits(ids, row_grafts=[to_grafts(s) for s in row_specs], attention_mask=mask)
    want = reference_rows(recipient, donor, rows, row_specs)
    for b in range(len(rows)):
        diff = max_diff(got[b, real_slice(mask[b])], want[b])
        assert diff < ATOL, f"{arch} row {b}: max abs diff {diff:.3g}\n{_describe(rows, row_specs)}"


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("arch", ARCHS)
def test_shared_grafts_match_reference(arch, seed):
    """`grafts=` applies one random graft (or union) to every row of an unpadded batch."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("shared", arch, seed))
    n = rng.randrange(5, 10)
    rows = [random_prompt(rng, n) for _ in range(2)]
    specs = random_specs(rng, recipient.config, n) or GraftSpec("last", "all", "all")
    got = grafter.logits(torch.tensor(rows), grafts=to_grafts(specs))
    want = reference_rows(recipient, donor, rows, [specs, specs])
    for b in range(2):
        diff = max_diff(got[b], want[b])
        assert diff < ATOL, f"{arch}: {specs}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("arch", ARCHS)
def test_nothing_grafted_is_recipient_and_everything_is_donor(arch):
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(5)
    rows = [random_prompt(rng, 7), random_prompt(rng, 4)]
    ids, mask = pad_batch(rows, "left")
    for row in rows:
        plain_r = recipient(torch.tensor([row])).logits[0]
        plain_d = donor(torch.tensor([row])).logits[0]
        assert max_diff(plain_r, plain_d) > 0.1  # the two models really differ
    nothing = [
        grafter.logits(ids, attention_mask=mask),
        grafter.logits(ids, grafts=None, attention_mask=mask),
        grafter.logits(ids, row_grafts=[None, []], attention_mask=mask),
    ]
    everything = [
        grafter.logits(ids, grafts=to_grafts(GraftSpec("all", "all", "all")), attention_mask=mask),
        grafter.logits(ids, row_grafts=[to_grafts(GraftSpec()), to_grafts(GraftSpec())], attention_mask=mask),
    ]
    for b, row in enumerate(rows):
        real = real_slice(mask[b])
        plain_r = recipient(torch.tensor([row])).logits[0]
        plain_d = donor(torch.tensor([row])).logits[0]
        for got in nothing:
            assert max_diff(got[b, real], plain_r) < ATOL, f"{arch}: nothing grafted != recipient"
        for got in everything:
            assert max_diff(got[b, real], plain_d) < ATOL, f"{arch}: all grafted != donor"


@pytest.mark.parametrize("arch", ARCHS)
def test_components_cover_every_parameter_exactly_once(arch):
    """Needs no weights: our own table covers each parameter element once, the engine lists the
    same components, each component alone equals the reference, and their union is the donor."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    leaves = leaf_components(recipient.config)

    # 1. Our table: every element of every (untied) parameter belongs to exactly one component.
    untied = untied_copy(recipient)
    counts = {name: torch.zeros_like(p) for name, p in untied.named_parameters()}
    for component in leaves:
        layer_ids = [None] if component in MODEL_LEVEL else range(num_layers(recipient))
        for layer in layer_ids:
            for name, dim, rows in parameter_slices(untied, component, layer):
                if rows is None:
                    counts[name] += 1
                else:
                    ones = torch.ones_like(counts[name].index_select(dim, rows))
                    counts[name].index_add_(dim, rows, ones)
    for name, count in counts.items():
        assert torch.all(count == 1), f"{arch}: {name} covered {count.min()}..{count.max()} times"

    # 2. The engine names the same components (groups aside).
    assert set(grafter.components) - set(GROUPS) == set(leaves)
    assert grafter.num_layers == num_layers(recipient)

    # 3. Each component alone, at every position and layer, equals the reference and changes
    #    something (so no component is a no-op); the union of all of them is the donor.
    rng = random.Random(11)
    row = random_prompt(rng, 6)
    ids = torch.tensor([row])
    plain = recipient(ids).logits[0]
    for component in leaves:
        spec = GraftSpec("all", "all", component)
        got = grafter.logits(ids, grafts=to_grafts(spec))[0]
        want = static_graft_logits(recipient, donor, row, resolve_row(spec, len(row), recipient.config)[0])
        assert max_diff(got, want) < ATOL, f"{arch}: component {component}: {max_diff(got, want):.3g}"
        assert max_diff(want, plain) > 1e-3, f"{arch}: grafting {component} changes nothing?"
    union = grafter.logits(ids, grafts=[to_grafts(GraftSpec("all", "all", c)) for c in leaves])[0]
    assert max_diff(union, donor(ids).logits[0]) < ATOL
    by_list = grafter.logits(ids, grafts=to_grafts(GraftSpec("all", "all", leaves)))[0]
    assert max_diff(by_list, donor(ids).logits[0]) < ATOL


@pytest.mark.parametrize("arch", ARCHS)
def test_groups_match_reference_per_layer_band(arch):
    """Groups with restricted layers leave model-level parts alone; with "all" they include them."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(3)
    row = random_prompt(rng, 6)
    ids = torch.tensor([row])
    for spec in [
        GraftSpec([0, -1], "last_half", "all"),
        GraftSpec("all", "all", "norms"),
        GraftSpec(slice(1, 4), 0, "norms"),
        GraftSpec(-2, "all", "attn"),
        GraftSpec("last", "first_half", "mlp"),
    ]:
        got = grafter.logits(ids, grafts=to_grafts(spec))[0]
        want = reference_logits(recipient, donor, ids[0], spec)
        assert max_diff(got, want) < ATOL, f"{arch}: {spec}: {max_diff(got, want):.3g}"


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "phi3"])
def test_fused_parts_alone_match_reference(arch):
    """Only k (fused QKV) or only gate/up (Phi-3's fused gate_up) on the middle tokens."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    row = random_prompt(random.Random(2), 8)
    ids = torch.tensor([row])
    parts = ["q", "k", "v"] + (["gate", "up"] if arch == "phi3" else [])
    for part in parts:
        spec = GraftSpec(slice(2, 6), "all", part)
        got = grafter.logits(ids, grafts=to_grafts(spec))[0]
        want = reference_logits(recipient, donor, ids[0], spec)
        assert max_diff(got, want) < ATOL, f"{arch}: only {part}: {max_diff(got, want):.3g}"


@pytest.mark.parametrize("arch", ["qwen3", "olmo2", "gemma3_text"])
@pytest.mark.parametrize("component", ["q_norm", "k_norm"])
def test_qk_norm_at_one_position_matches_reference(arch, component):
    """q/k norms act on [.., heads, head_dim] tensors (Gemma3 after the head transpose): grafting
    them at one token must change that token only, as the reference does."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    row = random_prompt(random.Random(4), 7)
    spec = GraftSpec(5, "all", component)
    got = grafter.logits(torch.tensor([row]), grafts=to_grafts(spec))[0]
    want = reference_logits(recipient, donor, torch.tensor(row), spec)
    per_position = (got - want).abs().amax(-1)
    assert per_position.max() < ATOL, f"{arch} {component} at position 5: per-position diff {per_position.tolist()}"
