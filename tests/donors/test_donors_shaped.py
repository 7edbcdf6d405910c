"""Shaped weight changes (ShapedDonor): scaled, low-rank and sparse changes equal the per-token
reference run on an explicitly built model W_r + scale * shape(W_d - W_r), for full, lazy and
LoRA donors, composed with positions, layers, components and heads."""

from __future__ import annotations

import math
import random

import pytest
import torch

from donor_fixtures import lora_model, merged_copy, save_model
from engine_fixtures import ATOL, max_diff, pad_batch, pair, random_spec, real_slice, stable_seed, to_grafts
from reference_grafter import GraftSpec, reference_logits, reference_unit_logits, shaped_model
from tiny_model_fixtures import ARCHS, make_model

SHAPES = [dict(scale=-0.7), dict(scale=2.5), dict(rank=2, scale=1.5), dict(rank=1), dict(top=0.1), dict(top=40)]


def shaped_grafter(recipient, donor, **shape):
    from weightgraft import Grafter
    from weightgraft.donors import ShapedDonor

    return Grafter(recipient, ShapedDonor(donor, **shape))


@pytest.mark.parametrize("arch", ARCHS)
def test_shapes_match_explicit_reference(arch):
    """Each shape on a left-padded batch with random grafts per row, against the per-token
    reference run with the explicitly shaped model as its donor."""
    recipient, donor = pair(arch)
    rng = random.Random(stable_seed("shaped", arch))
    for shape in SHAPES:
        grafter = shaped_grafter(recipient, donor, **shape)
        explicit = shaped_model(recipient, donor, **shape)
        lengths = [rng.randrange(4, 8) for _ in range(2)]
        rows = [[rng.randrange(1, 151) for _ in range(n)] for n in lengths]
        specs = [random_spec(rng, recipient.config, n) for n in lengths]
        ids, mask = pad_batch(rows, "left")
        got = grafter.logits(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
        for b, row in enumerate(rows):
            want = reference_logits(recipient, explicit, torch.tensor(row), specs[b])
            diff = max_diff(got[b, real_slice(mask[b])], want)
            assert diff < ATOL, f"{arch} {shape} row {b}: {specs[b]}: {diff:.3g}"


@pytest.mark.parametrize("arch", ["gpt2", "llama", "phi3", "gpt_neox"])
def test_shapes_compose_with_heads(arch):
    """O heads of a rank-1, then a scaled, change, at the last token of the last half."""
    from weightgraft import Graft

    recipient, donor = pair(arch)
    row = [7, 19, 3, 88, 41, 5]
    for shape in (dict(rank=1, scale=2.0), dict(scale=-1.0)):
        grafter = shaped_grafter(recipient, donor, **shape)
        spec = GraftSpec("last", "last_half", ["o", "q"], heads=[0, 2])
        got = grafter.logits(torch.tensor([row]), Graft(spec.positions, spec.layers, spec.components, heads=[0, 2]))
        want = reference_unit_logits(recipient, shaped_model(recipient, donor, **shape), row, spec)
        assert max_diff(got[0], want) < ATOL, f"{arch} {shape}"


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gemma2"])
def test_end_points(arch):
    """scale 0 is the recipient: the shaped modules hold the recipient's weights bit for bit
    (W_r + 0 * d) and run on every row, the same computation, so torch.equal. scale 1 and rank =
    full are the donor up to float32 rounding of W_r + (W_d - W_r) and of U S V^T (measured
    below 2e-6 on these logits; ATOL is the engine suite's)."""
    from weightgraft import Graft, Grafter

    recipient, donor = pair(arch)
    ids = torch.tensor([[4, 9, 150, 33, 2, 71], [8, 8, 1, 60, 99, 13]])
    everything = Graft("all", "all", "all")
    plain = Grafter(recipient, donor)
    assert torch.equal(shaped_grafter(recipient, donor, scale=0.0).logits(ids, everything), recipient(ids).logits)
    want = plain.logits(ids, everything)
    assert max_diff(shaped_grafter(recipient, donor, scale=1.0).logits(ids, everything), want) < ATOL
    full = recipient.config.hidden_size  # the rank of every q, o and FFN matrix here (k, v are smaller)
    square = Graft("all", "all", ["q", "o", "mlp"])
    assert max_diff(shaped_grafter(recipient, donor, rank=full).logits(ids, square), plain.logits(ids, square)) < ATOL
    assert max_diff(shaped_grafter(recipient, donor, top=1.0).logits(ids, everything), want) < ATOL
    # and a strict shape really differs from the donor
    assert max_diff(shaped_grafter(recipient, donor, rank=1).logits(ids, everything), want) > 1e-2


def test_lazy_donor_is_the_same_computation(tmp_path):
    """A lazily read checkpoint holds the donor's very weights: the shaped logits are equal."""
    from weightgraft import Graft

    recipient, donor = pair("llama")
    folder = save_model(donor, tmp_path / "donor")
    ids = torch.tensor([[4, 9, 150, 33, 2, 71]])
    graft = Graft("last", "last_half", ["o", "mlp"])
    for shape in (dict(rank=3, scale=0.5), dict(top=0.05)):
        lazy = shaped_grafter(recipient, str(folder), **shape).logits(ids, graft)
        full = shaped_grafter(recipient, donor, **shape).logits(ids, graft)
        assert torch.equal(lazy, full), shape


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3"])
def test_lora_shapes_match_merged_reference(arch):
    """A LoRA donor (factored scale and rank; dense top) against the explicit reference built on
    the merged model. The merged copy rounds W_r + s B A to float32, so the reference's change
    differs from s B A by ~1e-7; within ATOL."""
    from weightgraft import Graft, Grafter
    from weightgraft.donors import ShapedDonor

    recipient = make_model(arch, 1)
    peft_model = lora_model(arch, 1)
    merged = merged_copy(peft_model)
    row = [7, 19, 3, 88, 41, 5, 60]
    spec = GraftSpec(slice(2, None), "all", "all")
    for shape in (dict(scale=-2.0), dict(rank=2, scale=0.5), dict(rank=1), dict(top=0.2)):
        grafter = Grafter(recipient, ShapedDonor(peft_model, recipient=recipient, **shape))
        got = grafter.logits(torch.tensor([row]), Graft(slice(2, None), "all", "all"))
        want = reference_logits(recipient, shaped_model(recipient, merged, **shape), torch.tensor(row), spec)
        assert max_diff(got[0], want) < ATOL, f"{arch} {shape}: {max_diff(got[0], want):.3g}"


def test_variants_share_the_decomposition():
    from weightgraft import Graft, Grafter
    from weightgraft.donors import ShapedDonor

    recipient, donor = pair("llama")
    base = ShapedDonor(donor, rank=4)
    ids = torch.tensor([[4, 9, 150, 33]])
    grafter = Grafter(recipient, donors={"r4": base, "r1": base.variant(rank=1), "r2": base.variant(rank=2)})
    logits = [grafter.logits(ids, Graft("all", "all", "attn", donor=name)) for name in ("r1", "r2", "r4")]
    assert base._svd and base.variant(rank=1)._svd is base._svd
    assert max_diff(logits[0], logits[1]) > 1e-3 and max_diff(logits[1], logits[2]) > 1e-3


def test_bad_shapes_name_the_fix():
    from weightgraft import Graft, Grafter
    from weightgraft.donors import ShapedDonor, ShapeError
    from weightgraft.errors import UserError

    recipient, donor = pair("llama")
    for scale in (math.nan, math.inf, -math.inf, "1"):
        with pytest.raises(ShapeError, match="finite number"):
            ShapedDonor(donor, scale=scale)
    with pytest.raises(ShapeError, match="not both"):
        ShapedDonor(donor, rank=2, top=0.5)
    with pytest.raises(ShapeError, match="count"):
        ShapedDonor(donor, top=1.5)
    grafter = Grafter(recipient, ShapedDonor(donor, rank=20))
    with pytest.raises(
        ShapeError, match=r"rank 20 is above the rank of model.layers.0.self_attn.k_proj.weight \(a 16 x 32"
    ):
        grafter.logits(torch.tensor([[4, 9]]), Graft("all", 0, "k"))
    assert issubclass(ShapeError, UserError)
