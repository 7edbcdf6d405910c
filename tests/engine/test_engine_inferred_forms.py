"""Inferred adapters that need more than rows graft exactly as the independent per-token reference
computes them, on padded batches: OPT and BioGPT (position embeddings called 'whole' on the
attention mask, OPT's MLP and its norm on flat tokens), GraniteMoeShared (a dense shared MLP
beside the MoE block, the `shared_expert`) and Llama 4 (experts called 'per_expert' on every token
once per expert, single experts among them). The reference's tables are hand-written
(`inferred_fixtures`), so the inferred roles are checked along with the engine."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import (
    ATOL,
    max_diff,
    pad_batch,
    random_positions,
    random_prompt,
    random_spec,
    random_specs,
    real_slice,
    reference_rows,
    stable_seed,
    to_grafts,
)
from inferred_fixtures import KINDS, pair
from reference_activations import reference_activations, reference_modules
from reference_grafter import GraftSpec, reference_unit_logits, unit_counts

# The component only these models have, or that only the new call forms reach.
SPECIAL = {
    "opt": ["pos_embed", "up", "ln2"],
    "biogpt": ["pos_embed"],
    "granitemoeshared": ["shared_expert"],
    "llama4_text": ["experts", "router"],
}


def _grafter(kind: str):
    from weightgraft import Grafter

    recipient, donor = pair(kind)
    return Grafter(recipient, donor)


def _padded(rng: random.Random, side: str = "left"):
    rows = [random_prompt(rng, rng.randrange(4, 9)) for _ in range(3)]
    return rows, *pad_batch(rows, side)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
def test_random_grafts_match_reference(kind, seed):
    """Random position x layer x component grafts, the model's special components among them."""
    recipient, donor = pair(kind)
    rng = random.Random(stable_seed("inferred-forms", kind, seed))
    rows, ids, mask = _padded(rng, "left" if seed == 0 else "right")
    layers = recipient.config.num_hidden_layers
    specs = [random_specs(rng, recipient.config, len(row)) for row in rows]
    specs[0] = GraftSpec(random_positions(rng, len(rows[0])), rng.randrange(layers), SPECIAL[kind])
    specs[1] = GraftSpec("all", "all", ["mlp", "q"])
    got = _grafter(kind).logits(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
    want = reference_rows(recipient, donor, rows, specs)
    for b in range(len(rows)):
        diff = max_diff(got[b, real_slice(mask[b])], want[b])
        assert diff < ATOL, f"{kind} row {b}: {specs[b]}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("kind", KINDS)
def test_position_graft_changes_and_matches(kind):
    """One position of the special component: equal to the reference, and not a no-op."""
    from weightgraft import Graft

    recipient, donor = pair(kind)
    row = random_prompt(random.Random(stable_seed("one-position", kind)), 7)
    spec = GraftSpec([2], 0, SPECIAL[kind][0])
    grafter = _grafter(kind)
    ids = torch.tensor([row])
    got = grafter.logits(ids, grafts=Graft([2], 0, SPECIAL[kind][0]))[0]
    want = reference_rows(recipient, donor, [row], [spec])[0]
    assert max_diff(got, want) < ATOL
    assert max_diff(got, grafter.logits(ids)[0]) > 1e-3


def _unit_specs(kind: str, config) -> list[GraftSpec]:
    if kind in ("granitemoeshared", "llama4_text"):
        count = unit_counts(config)["experts"][0]
        return [
            GraftSpec("all", 1, "experts", experts=[1]),
            GraftSpec([0, 3], "all", "experts", experts=list(range(1, count))),
            GraftSpec("last", 2, "o", heads=[0, 3]),
        ]
    return [
        GraftSpec("last", 1, "o", heads=[1]),
        GraftSpec([1, 4], 0, "v", heads=[2, 3]),
        GraftSpec("all", 1, "up", neurons=[0, 5, 77]),
        GraftSpec([0, 2], 0, "down", neurons=list(range(40))),
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_unit_grafts_match_reference(kind):
    """Heads, neurons of OPT's flat MLP (columns and input columns of a 'flat' module), experts."""
    from weightgraft import Graft

    recipient, donor = pair(kind)
    row = random_prompt(random.Random(stable_seed("units", kind)), 6)
    grafter = _grafter(kind)
    for spec in _unit_specs(kind, recipient.config):
        graft = Graft(
            spec.positions, spec.layers, spec.components, heads=spec.heads, neurons=spec.neurons, experts=spec.experts
        )
        got = grafter.logits(torch.tensor([row]), grafts=graft)[0]
        want = reference_unit_logits(recipient, donor, torch.tensor(row), spec)
        diff = max_diff(got, want)
        assert diff < ATOL, f"{kind}: {spec}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("kind", ["granitemoeshared", "llama4_text"])
def test_one_expert_changes_and_the_experts_with_router_are_the_block(kind):
    """A single expert's graft moves the logits; every expert plus the router (plus the shared
    expert) is the group mlp."""
    from weightgraft import Graft

    recipient, donor = pair(kind)
    count = unit_counts(recipient.config)["experts"][0]
    ids = torch.tensor([random_prompt(random.Random(stable_seed("experts", kind)), 6)])
    grafter = _grafter(kind)
    plain = grafter.logits(ids)
    assert max_diff(grafter.logits(ids, grafts=Graft("all", 1, "experts", experts=[2])), plain) > 1e-3
    parts = [Graft("all", 1, "experts", experts=list(range(count))), Graft("all", 1, ["router", "shared_expert"])]
    assert max_diff(grafter.logits(ids, grafts=parts), grafter.logits(ids, grafts=Graft("all", 1, "mlp"))) < ATOL


@pytest.mark.parametrize("kind", KINDS)
def test_cache_equals_the_reference(kind):
    """Every named activation, [batch, seq, ...] even where the block runs a module on flat tokens
    (OPT's MLP) or the experts on every token once per expert (Llama 4: [batch, seq, experts, ...])."""
    recipient, donor = pair(kind)
    grafter = _grafter(kind)
    rng = random.Random(stable_seed("activations", kind))
    rows = [random_prompt(rng, 7), random_prompt(rng, 4)]
    specs = [random_spec(rng, recipient.config, len(r), allow_mask=False) for r in rows]
    ids, mask = pad_batch(rows, "left")
    with torch.no_grad():
        acts = grafter.cache(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
    assert set(acts) == set(reference_modules(recipient.config, grafter.num_layers))
    if kind == "llama4_text":
        assert acts["blocks.0.experts"].shape[:3] == (2, 7, 4)
    for b, (row, spec) in enumerate(zip(rows, specs)):
        ref = reference_activations(recipient, donor, row, spec, grafter.num_layers)
        real = mask[b].nonzero().flatten()
        for name, value in acts.items():
            diff = max_diff(value[b, real].reshape(len(real), -1), ref["acts"][name])
            assert diff < ATOL, f"{kind} row {b} {name}: {diff:.3g}"


@pytest.mark.parametrize("generated", ["none", "last"])
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_generation_matches_reference(kind, generated):
    """Decoding against the KV cache: the 'whole' position embedding sees the cache's length."""
    from reference_grafter import reference_generate

    recipient, donor = pair(kind)
    rng = random.Random(stable_seed("gen", kind, generated))
    rows = [random_prompt(rng, 6), random_prompt(rng, 4)]
    specs = [[GraftSpec("last", "all", "all"), GraftSpec(1, 0, SPECIAL[kind])], random_specs(rng, recipient.config, 4)]
    ids, mask = pad_batch(rows, "left")
    out = _grafter(kind).generate(
        ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask, max_new_tokens=4, generated=generated
    )
    for b, (row, spec) in enumerate(zip(rows, specs)):
        want = reference_generate(recipient, donor, row, spec, 4, generated)
        assert out[b, ids.shape[1] :].tolist() == want, f"{kind} generated={generated!r} row {b} ({spec})"
