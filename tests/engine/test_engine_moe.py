"""Mixture-of-experts models (Mixtral, OLMoE, Qwen3-MoE, Qwen2-MoE): router, experts, shared
expert and single experts graft exactly as the independent per-token reference computes them,
on padded batches; the adapters pass `check_adapter`, which catches a wrong call form."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from engine_fixtures import (
    ATOL,
    grafter_for,
    max_diff,
    pad_batch,
    pair,
    random_positions,
    random_prompt,
    random_specs,
    real_slice,
    reference_rows,
    stable_seed,
    to_grafts,
)
from reference_grafter import (
    GraftSpec,
    component_table,
    reference_logits,
    reference_unit_logits,
    static_graft_logits,
    unit_counts,
)
from tiny_model_fixtures import MOE_ARCHS, num_layers

MOE_PARTS = ["router", "experts", "shared_expert", "shared_expert_gate"]


def to_unit_graft(spec: GraftSpec):
    from weightgraft import Graft

    return Graft(spec.positions, spec.layers, spec.components, heads=spec.heads, experts=spec.experts)


def _padded(rng: random.Random, count: int = 3, low: int = 4, high: int = 9):
    rows = [random_prompt(rng, rng.randrange(low, high)) for _ in range(count)]
    return rows, *pad_batch(rows, "left")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_random_grafts_match_reference(arch, seed):
    """Random position x layer x component grafts (router, experts, shared expert among them)."""
    recipient, donor = pair(arch)
    rng = random.Random(stable_seed("moe", arch, seed))
    rows, ids, mask = _padded(rng)
    row_specs = [random_specs(rng, recipient.config, len(row)) for row in rows]
    moe = [c for c in MOE_PARTS if c in component_table(recipient.config)[0]]
    row_specs[0] = GraftSpec(random_positions(rng, len(rows[0])), rng.randrange(num_layers(recipient)), moe)
    row_specs[1] = GraftSpec("all", "all", [rng.choice(moe), "q"])
    got = grafter_for(arch).logits(ids, row_grafts=[to_grafts(s) for s in row_specs], attention_mask=mask)
    want = reference_rows(recipient, donor, rows, row_specs)
    for b in range(len(rows)):
        diff = max_diff(got[b, real_slice(mask[b])], want[b])
        assert diff < ATOL, f"{arch} row {b}: {row_specs[b]}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_expert_grafts_match_reference(arch):
    """One expert, a set of experts, two graft's experts meeting at a position, with and without the
    router: each token computes its chosen experts with the grafted ones' donor weights."""
    recipient, donor = pair(arch)
    count = unit_counts(recipient.config)["experts"][0]
    rng = random.Random(stable_seed("experts", arch))
    rows, ids, mask = _padded(rng)
    specs = [
        [GraftSpec("all", "all", "experts", experts=[rng.randrange(count)])],
        [
            GraftSpec(slice(0, 3), rng.randrange(num_layers(recipient)), "experts", experts=[0, 2]),
            GraftSpec(slice(2, None), "all", "experts", experts=[1]),
        ],
        [GraftSpec("last", "all", "experts", experts=[3]), GraftSpec([0, -1], "all", "router")],
    ]
    grafter = grafter_for(arch)
    got = grafter.logits(ids, row_grafts=[[to_unit_graft(s) for s in row] for row in specs], attention_mask=mask)
    plain = grafter.logits(ids, attention_mask=mask)
    for b, row in enumerate(rows):
        want = reference_unit_logits(recipient, donor, row, specs[b])
        diff = max_diff(got[b, real_slice(mask[b])], want)
        assert diff < ATOL, f"{arch} row {b}: {specs[b]}: max abs diff {diff:.3g}"
        assert max_diff(want, plain[b, real_slice(mask[b])]) > 1e-3, f"{arch} row {b}: {specs[b]} changes nothing?"


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_every_expert_and_the_router_is_the_whole_block(arch):
    """experts=all + router == the block's components == the mlp group == the reference's block;
    every expert without the router is the donor's experts on the recipient's routing (not the block)."""
    from weightgraft import Graft

    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    count = unit_counts(recipient.config)["experts"][0]
    layer_table = component_table(recipient.config)[0]
    rng = random.Random(stable_seed("block", arch))
    rows, ids, mask = _padded(rng)
    layers = [0, num_layers(recipient) - 1]
    split = [Graft([1, -1], layers, "experts", experts=list(range(count))), Graft([1, -1], layers, "router")]
    if "shared_expert" in layer_table:
        split.append(Graft([1, -1], layers, ["shared_expert", "shared_expert_gate"]))
    by_experts = grafter.logits(ids, grafts=split, attention_mask=mask)
    by_group = grafter.logits(ids, grafts=Graft([1, -1], layers, "mlp"), attention_mask=mask)
    experts_only = grafter.logits(ids, grafts=split[0], attention_mask=mask)
    whole_experts = grafter.logits(ids, grafts=Graft([1, -1], layers, "experts"), attention_mask=mask)
    assert max_diff(by_experts, by_group) < ATOL
    assert max_diff(experts_only, whole_experts) < ATOL
    assert max_diff(experts_only, by_group) > 1e-3, f"{arch}: the router's choice changes nothing?"
    for b, row in enumerate(rows):
        want = reference_logits(recipient, donor, torch.tensor(row), GraftSpec([1, -1], layers, "mlp"))
        assert max_diff(by_group[b, real_slice(mask[b])], want) < ATOL, f"{arch} row {b}"


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_heads_and_positions_still_graft_attention(arch):
    """A head graft and a position graft of attention components on a MoE model."""
    recipient, donor = pair(arch)
    rng = random.Random(stable_seed("attention", arch))
    rows, ids, mask = _padded(rng, count=2)
    heads = [GraftSpec("all", "all", ["q", "o"], heads=[1, 3]), GraftSpec([0, 2], 1, "v", heads=[0])]
    grafter = grafter_for(arch)
    got = grafter.logits(ids, row_grafts=[to_unit_graft(s) for s in heads], attention_mask=mask)
    for b, row in enumerate(rows):
        want = reference_unit_logits(recipient, donor, row, heads[b])
        assert max_diff(got[b, real_slice(mask[b])], want) < ATOL, f"{arch} row {b}: {heads[b]}"
    positions = [GraftSpec([1, -1], "all", "attn"), GraftSpec("last", "last_half", ["o", "ln2", "router"])]
    got = grafter.logits(ids, row_grafts=[to_grafts(s) for s in positions], attention_mask=mask)
    want = reference_rows(recipient, donor, rows, positions)
    for b in range(len(rows)):
        assert max_diff(got[b, real_slice(mask[b])], want[b]) < ATOL, f"{arch} row {b}: {positions[b]}"


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_nothing_grafted_is_recipient_and_everything_is_donor(arch):
    from weightgraft import Graft

    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rows, ids, mask = _padded(random.Random(stable_seed("ends", arch)))
    nothing = grafter.logits(ids, attention_mask=mask)
    everything = grafter.logits(ids, grafts=Graft(), attention_mask=mask)
    assert max_diff(nothing, everything) > 1e-2
    for b, row in enumerate(rows):
        real = real_slice(mask[b])
        with torch.no_grad():
            alone = [model(input_ids=torch.tensor([row])).logits[0] for model in (recipient, donor)]
        assert max_diff(nothing[b, real], alone[0]) < ATOL, f"{arch} row {b}: no graft is not the recipient"
        assert max_diff(everything[b, real], alone[1]) < ATOL, f"{arch} row {b}: all is not the donor"


def test_expert_selection_errors_name_the_fix():
    from weightgraft import Graft
    from weightgraft.engine.units import UnitError

    ids = torch.tensor([[5, 6, 7]])
    grafter = grafter_for("mixtral")
    with pytest.raises(UnitError, match=r"4 experts \(0..3\)"):
        grafter.logits(ids, Graft(components="experts", experts=[4]))
    with pytest.raises(UnitError, match=r"\['router'\] have no experts"):
        Graft(components="router", experts=[0])
    with pytest.raises(UnitError, match="not both"):
        Graft(components="experts", experts=[0], heads=[0])
    dense = grafter_for("llama")
    with pytest.raises(ValueError, match=r"no component\(s\) \['experts'\]"):
        dense.logits(ids, Graft(components="experts", experts=[0]))


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_check_adapter_passes_and_catches_a_wrong_call_form(arch):
    from weightgraft.adapters import AdapterError, adapter_for, check_adapter

    recipient, _ = pair(arch)
    adapter = adapter_for(recipient)
    check_adapter(recipient, adapter)
    as_rows = dataclasses.replace(adapter, call_forms={})
    with pytest.raises(AdapterError, match=r"'model\.layers\.0\.mlp\.experts' maps \(3, 32\).*call_forms"):
        check_adapter(recipient, as_rows)
    # The whole block as one component: it unpacks batch and sequence, so it needs "batched".
    block = {c: ref for c, ref in adapter.per_layer.items() if not str(ref).startswith("mlp.")}
    whole = dataclasses.replace(adapter, per_layer={**block, "experts": "mlp"}, call_forms={})
    with pytest.raises(AdapterError, match=r"'model\.layers\.0\.mlp' called on rows .* raises ValueError"):
        check_adapter(recipient, whole)
    check_adapter(recipient, dataclasses.replace(whole, call_forms={"mlp": "batched"}))


def test_a_batched_block_grafts_as_the_reference(registry_restored):
    """An adapter that names the whole MoE block as one component, called on [1, rows, hidden]."""
    from weightgraft import Graft, Grafter, register_adapter
    from weightgraft.adapters import adapter_for

    recipient, donor = pair("olmoe")
    adapter = adapter_for(recipient)
    block = {c: ref for c, ref in adapter.per_layer.items() if not str(ref).startswith("mlp.")}
    register_adapter(
        dataclasses.replace(adapter, per_layer={**block, "experts": "mlp"}, call_forms={"mlp": "batched"}),
        replace=True,
    )
    rows, ids, mask = _padded(random.Random(stable_seed("batched")))
    got = Grafter(recipient, donor).logits(ids, grafts=Graft([0, -1], [1, 2], "experts"), attention_mask=mask)
    for b, row in enumerate(rows):
        want = reference_logits(recipient, donor, torch.tensor(row), GraftSpec([0, -1], [1, 2], "mlp"))
        assert max_diff(got[b, real_slice(mask[b])], want) < ATOL, f"row {b}"


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_reference_block_shortcut(arch):
    """The reference's own check: its mlp block on every token equals a copy with the donor's block."""
    recipient, donor = pair(arch)
    row = random_prompt(random.Random(stable_seed("shortcut", arch)), 6)
    want = static_graft_logits(recipient, donor, row, {("experts", 1), ("router", 1)})
    got = reference_logits(recipient, donor, torch.tensor(row), GraftSpec("all", 1, ["experts", "router"]))
    assert max_diff(got, want) < ATOL
