"""Several donors in one pass: each Graft names its donor; the engine equals the per-token
reference (which copies each donor's parameters in, token by token) on every architecture."""

from __future__ import annotations

import functools
import random

import pytest
import torch

from engine_fixtures import (
    ATOL,
    assert_unchanged,
    max_diff,
    pad_batch,
    pair,
    random_components,
    random_layers,
    random_positions,
    random_prompt,
    real_slice,
    snapshot,
    stable_seed,
    to_grafts,
)
from reference_grafter import (
    GraftSpec,
    leaf_components,
    reference_generate,
    reference_logits,
)
from tiny_model_fixtures import ARCHS, make_model


@functools.cache
def trio(arch: str):
    """(recipient, {"sft": donor, "task": a third model}); all three differ."""
    recipient, sft = pair(arch)
    return recipient, {"sft": sft, "task": make_model(arch, 3)}


def grafter_of(arch: str, **kwargs):
    from weightgraft import Grafter

    recipient, donors = trio(arch)
    return Grafter(recipient, donors=donors, **kwargs)


def _two_donor_row(rng: random.Random, config, n: int) -> list[GraftSpec]:
    """Grafts for one row from both donors that never claim one (position, layer, component)
    twice: either disjoint components (each donor its own share of the leaves) or disjoint
    positions. Sometimes a donor gets two grafts (a union)."""
    layers = num_layers_of(config)
    if rng.random() < 0.5:
        leaves = leaf_components(config)
        rng.shuffle(leaves)
        cut = rng.randrange(1, len(leaves))
        shares = {"sft": leaves[:cut], "task": leaves[cut:]}
        specs = [
            GraftSpec(
                random_positions(rng, n),
                random_layers(rng, layers),
                rng.sample(share, rng.randrange(1, min(3, len(share)) + 1)),
                donor,
            )
            for donor, share in shares.items()
        ]
    else:
        positions = list(range(n))
        rng.shuffle(positions)
        cut = rng.randrange(1, n)
        specs = [
            GraftSpec(sorted(part), random_layers(rng, layers), random_components(rng, config), donor)
            for donor, part in (("sft", positions[:cut]), ("task", positions[cut:]))
        ]
    if rng.random() < 0.3:  # the same donor twice: a union
        extra = GraftSpec(
            random_positions(rng, n), random_layers(rng, layers), random_components(rng, config), specs[0].donor
        )
        other = specs[1]
        if not _overlaps(extra, other, n, config):
            specs.append(extra)
    return specs


def num_layers_of(config) -> int:
    return config.get_text_config().num_hidden_layers


def _overlaps(a: GraftSpec, b: GraftSpec, n: int, config) -> bool:
    from reference_grafter import resolve_row

    plan_a = resolve_row(GraftSpec(a.positions, a.layers, a.components), n, config)
    plan_b = resolve_row(GraftSpec(b.positions, b.layers, b.components), n, config)
    return any(x & y for x, y in zip(plan_a, plan_b))


@pytest.mark.parametrize("arch", ARCHS)
def test_two_donors_match_reference_in_a_padded_batch(arch):
    recipient, donors = trio(arch)
    grafter = grafter_of(arch)
    rng = random.Random(stable_seed("two donors", arch))
    side = "left" if ARCHS.index(arch) % 2 == 0 else "right"
    lengths = [rng.randrange(4, 9) for _ in range(3)]
    rows = [random_prompt(rng, n) for n in lengths]
    row_specs = [_two_donor_row(rng, recipient.config, n) for n in lengths]
    row_specs[2] = row_specs[2][:1]  # one row grafted from a single donor only
    ids, mask = pad_batch(rows, side)
    row_grafts = [to_grafts(s) for s in row_specs]
    got = grafter.logits(ids, row_grafts=row_grafts, attention_mask=mask)
    last = grafter.last_logits(ids, row_grafts=row_grafts, attention_mask=mask)
    for b, (row, specs) in enumerate(zip(rows, row_specs)):
        want = reference_logits(recipient, donors, torch.tensor(row), specs)
        diff = max_diff(got[b, real_slice(mask[b])], want)
        assert diff < ATOL, f"{arch} {side}-padded row {b} {specs}: max abs diff {diff:.3g}"
        assert max_diff(last[b], want[-1]) < ATOL, f"{arch} last_logits row {b}"


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "phi3", "qwen3"])
def test_one_fused_matrix_split_between_donors(arch):
    """q from one donor and k/v (or gate from one, up from the other) at the same token: the
    fused module's columns come from two donors in one call."""
    recipient, donors = trio(arch)
    grafter = grafter_of(arch)
    row = random_prompt(random.Random(6), 7)
    specs = [GraftSpec([2, -1], "all", "q", "sft"), GraftSpec([2, -1], "last_half", ["k", "v"], "task")]
    if arch == "phi3":
        specs += [GraftSpec("all", 0, "gate", "task"), GraftSpec("all", "all", "up", "sft")]
    got = grafter.logits(torch.tensor([row]), grafts=to_grafts(specs))[0]
    want = reference_logits(recipient, donors, torch.tensor(row), specs)
    assert max_diff(got, want) < ATOL, f"{arch}: {max_diff(got, want):.3g}"


def test_rows_that_differ_only_in_their_donor_do_not_share_past_the_graft():
    """A sweep of one prompt under the same graft from either donor: sharing must keep "from sft"
    and "from task" apart, and sharing on equals sharing off."""
    arch = "llama"
    recipient, donors = trio(arch)
    grafter = grafter_of(arch)
    row = random_prompt(random.Random(9), 9)
    specs = [
        None,
        GraftSpec("last", "last_half", ["o", "mlp"], "sft"),
        GraftSpec("last", "last_half", ["o", "mlp"], "task"),
        [GraftSpec(3, "all", "mlp", "sft"), GraftSpec("last", "all", "attn", "task")],
        [GraftSpec(3, "all", "mlp", "task"), GraftSpec("last", "all", "attn", "sft")],
    ]
    ids = torch.tensor([row] * len(specs))
    row_grafts = [to_grafts(s) for s in specs]
    shared = grafter.logits(ids, row_grafts=row_grafts)
    alone = grafter_of(arch, share_prefixes=False).logits(ids, row_grafts=row_grafts)
    assert max_diff(shared, alone) < 1e-5  # fp32 rounding: prefix sharing on vs off (measured 1.7e-6)
    for b, spec in enumerate(specs):
        want = reference_logits(recipient, donors, torch.tensor(row), spec)
        assert max_diff(shared[b], want) < ATOL, f"row {b} {spec}"
    assert max_diff(shared[1, -1], shared[2, -1]) > 1e-2, "the two donors give the same logits?"
    # the planner sees four histories after position 3 and five at the end
    from weightgraft.engine.sharing import plan_segments

    masks = grafter._graft_masks(None, row_grafts, torch.ones_like(ids)).masks
    segments = plan_segments(ids, torch.ones_like(ids), masks)
    assert [len(s.rows) for s in segments] == [1, 3, 5]


@pytest.mark.parametrize("generated", ["none", "last"])
@pytest.mark.parametrize("arch", ["gpt2", "gemma2"])
def test_generation_with_two_donors_matches_reference(arch, generated):
    recipient, donors = trio(arch)
    grafter = grafter_of(arch)
    rows = [random_prompt(random.Random(1), 6), random_prompt(random.Random(2), 4)]
    specs = [
        [GraftSpec("last", "all", "mlp", "task"), GraftSpec("last", "first_half", "attn", "sft")],
        [GraftSpec(0, "all", "all", "sft"), GraftSpec(-1, "last_half", "o", "task")],
    ]
    ids, mask = pad_batch(rows, "left")
    out = grafter.generate(
        ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask, max_new_tokens=3, generated=generated
    )
    for b, (row, spec) in enumerate(zip(rows, specs)):
        want = reference_generate(recipient, donors, row, spec, 3, generated)
        assert out[b, ids.shape[1] :].tolist() == want, f"{arch} {generated} row {b}"


def test_models_bit_identical_after_calls_with_several_donors():
    from weightgraft import Grafter

    recipient, donors = trio("gpt2")
    before = [snapshot(recipient)] + [snapshot(m) for m in donors.values()]
    grafter = Grafter(recipient, donors=donors)
    rows = [random_prompt(random.Random(3), 6), random_prompt(random.Random(4), 4)]
    ids, mask = pad_batch(rows, "left")
    row_grafts = [
        to_grafts([GraftSpec("all", "all", "mlp", "sft"), GraftSpec("all", "all", "attn", "task")]),
        to_grafts(GraftSpec("last", "all", "all", "task")),
    ]
    grafter.logits(ids, row_grafts=row_grafts, attention_mask=mask)
    grafter.generate(ids, row_grafts=row_grafts, attention_mask=mask, max_new_tokens=2, generated="last")
    with pytest.raises(ValueError, match="names no donor, but this Grafter has several"):
        grafter.logits(ids, grafts=to_grafts(GraftSpec()), attention_mask=mask)
    for model, state, what in zip([recipient, *donors.values()], before, ["recipient", "sft", "task"]):
        assert_unchanged(model, state, what)
        assert not model.training


def test_one_donor_keeps_working_and_is_called_donor():
    from weightgraft import Graft, Grafter

    recipient, donor = pair("llama")
    grafter = Grafter(recipient, donor)
    assert grafter.donor_names == ["donor"]
    ids = torch.tensor([random_prompt(random.Random(5), 5)])
    plain = grafter.logits(ids, grafts=Graft("last", "all", "mlp"))
    named = grafter.logits(ids, grafts=Graft("last", "all", "mlp", donor="donor"))
    assert torch.equal(plain, named)
    want = reference_logits(recipient, donor, ids[0], GraftSpec("last", "all", "mlp"))
    assert max_diff(plain[0], want) < ATOL
    with pytest.raises(ValueError, match=r"names donor 'sft'; this Grafter's donors are \['donor'\]"):
        grafter.logits(ids, grafts=Graft("last", "all", "mlp", donor="sft"))


def test_a_graft_without_donor_among_several_is_an_error_listing_them():
    from weightgraft import Graft

    grafter = grafter_of("gpt2")
    ids = torch.tensor([random_prompt(random.Random(0), 5)])
    with pytest.raises(ValueError, match=r"names no donor, but this Grafter has several: \['sft', 'task'\]"):
        grafter.logits(ids, grafts=Graft("last", "all", "mlp"))
    with pytest.raises(ValueError, match=r"names donor 'tsak'; this Grafter's donors are \['sft', 'task'\]"):
        grafter.logits(ids, row_grafts=[[Graft("last", "all", "mlp", donor="tsak")]])


def test_overlapping_grafts_from_two_donors_are_an_error_naming_the_overlap():
    from weightgraft import Graft

    grafter = grafter_of("llama")
    rows = [random_prompt(random.Random(0), 6), random_prompt(random.Random(1), 4)]
    ids, mask = pad_batch(rows, "left")
    fine = [Graft("last", "all", "attn", donor="sft"), Graft("last", "all", "attn", donor="sft")]
    clash = [Graft("last", "all", "attn", donor="sft"), Graft([0, -1], [1], ["o", "up"], donor="task")]
    # row 1 has 4 real tokens (2 pads on the left): its last token is position 3
    message = (
        r"grafts of row 1 give position 3 \(counting real tokens\), layer 1, component 'o' "
        r"to more than one donor: \['sft', 'task'\]"
    )
    with pytest.raises(ValueError, match=message):
        grafter.logits(ids, row_grafts=[fine, clash], attention_mask=mask)
    with pytest.raises(ValueError, match=r"component 'lm_head' to more than one donor: \['sft', 'task'\]"):
        grafter.logits(
            ids, grafts=[Graft(0, "all", "all", donor="task"), Graft(0, 0, "lm_head", donor="sft")], attention_mask=mask
        )
    # the same donor twice is a union, equal to one graft that covers both
    union = grafter.logits(ids, row_grafts=[fine, fine], attention_mask=mask)
    once = grafter.logits(ids, grafts=Graft("last", "all", "attn", donor="sft"), attention_mask=mask)
    assert torch.equal(union, once)


def test_constructor_errors():
    from weightgraft import Grafter

    recipient, donors = trio("gpt2")
    with pytest.raises(ValueError, match="either donor .* or donors="):
        Grafter(recipient, donors["sft"], donors=donors)
    with pytest.raises(TypeError, match="Grafter needs a donor"):
        Grafter(recipient)
    with pytest.raises(TypeError, match="several donors go by keyword"):
        Grafter(recipient, donors)
    with pytest.raises(ValueError, match="non-empty dict"):
        Grafter(recipient, donors={})
    with pytest.raises(TypeError, match="a donor must be a torch model .* not int"):
        Grafter(recipient, donors={"sft": donors["sft"], "task": 42})
    with pytest.raises(FileNotFoundError, match="'path/to/task' does not exist"):  # a string is a checkpoint folder
        Grafter(recipient, donors={"sft": donors["sft"], "task": "path/to/task"})
    llama, _ = pair("llama")
    with pytest.raises(ValueError, match="recipient is 'gpt2', donor 'task' is 'llama'"):
        Grafter(recipient, donors={"sft": donors["sft"], "task": llama})
