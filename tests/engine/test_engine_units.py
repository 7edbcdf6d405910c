"""Heads and neurons: the engine's unit grafts equal the per-token reference that copies exactly
those weight slices, on every architecture, padded batches included."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import ATOL, grafter_for, max_diff, pad_batch, pair, random_positions, real_slice, stable_seed
from reference_grafter import GraftSpec, reference_unit_logits, unit_counts
from tiny_model_fixtures import ARCHS, num_layers

HEADS = ["q", "k", "v", "o"]


def to_unit_graft(spec: GraftSpec):
    from weightgraft import Graft

    return Graft(spec.positions, spec.layers, spec.components, heads=spec.heads, neurons=spec.neurons)


def random_unit_spec(rng: random.Random, config, n: int) -> GraftSpec:
    counts = unit_counts(config)
    layers = rng.choice(["all", rng.randrange(num_layers_of(config)), "last_half"])
    positions = random_positions(rng, n, allow_mask=False)
    if rng.random() < 0.5:
        comps = rng.sample(HEADS, rng.randrange(1, 3))
        most = min(counts[c][0] for c in comps)
        heads = rng.sample(range(most), rng.randrange(1, most))  # a strict subset
        return GraftSpec(positions, layers, comps, heads=sorted(heads))
    ffn = [c for c in ("gate", "up", "down") if c in counts]
    comps = rng.choice([rng.sample(ffn, rng.randrange(1, len(ffn) + 1)), "mlp"])
    neurons = rng.sample(range(counts[ffn[-1]][0]), rng.randrange(1, 9))
    return GraftSpec(positions, layers, comps, neurons=neurons)


def num_layers_of(config) -> int:
    return config.get_text_config().num_hidden_layers


@pytest.mark.parametrize("arch", ARCHS)
def test_unit_grafts_match_reference(arch):
    """A left-padded batch; each row gets one or two random head/neuron grafts (unions included)."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("units", arch))
    lengths = [rng.randrange(4, 9) for _ in range(3)]
    rows = [[rng.randrange(1, 151) for _ in range(n)] for n in lengths]
    specs = [[random_unit_spec(rng, recipient.config, n) for _ in range(rng.choice([1, 2]))] for n in lengths]
    ids, mask = pad_batch(rows, "left")
    got = grafter.logits(ids, row_grafts=[[to_unit_graft(s) for s in row] for row in specs], attention_mask=mask)
    plain = grafter.logits(ids, attention_mask=mask)
    for b, row in enumerate(rows):
        want = reference_unit_logits(recipient, donor, row, specs[b])
        diff = max_diff(got[b, real_slice(mask[b])], want)
        assert diff < ATOL, f"{arch} row {b}: {specs[b]}: max abs diff {diff:.3g}"
        assert max_diff(want, plain[b, real_slice(mask[b])]) > 1e-3, f"{arch} row {b}: {specs[b]} changes nothing?"


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "phi3", "llama"])
@pytest.mark.parametrize("component", HEADS)
def test_one_head_of_each_component_right_padded(arch, component):
    """Each head component alone (fused c_attn, interleaved query_key_value, qkv_proj included),
    one head at two positions, in a right-padded batch."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("one head", arch, component))
    rows = [[rng.randrange(1, 151) for _ in range(n)] for n in (6, 4)]
    ids, mask = pad_batch(rows, "right")
    count = unit_counts(recipient.config)[component][0]
    spec = GraftSpec([1, -1], "all", component, heads=[count - 1])
    got = grafter.logits(ids, grafts=to_unit_graft(spec), attention_mask=mask)
    for b, row in enumerate(rows):
        want = reference_unit_logits(recipient, donor, row, spec)
        assert max_diff(got[b, real_slice(mask[b])], want) < ATOL, f"{arch} {component}"


@pytest.mark.parametrize("arch", ["gpt2", "llama", "phi3", "gpt_neox"])
def test_every_unit_is_the_component(arch):
    """Every head (in one graft, or split over two) and every neuron is the whole component: the
    engine resolves them to the same keys, so the logits are the same computation (torch.equal);
    a strict subset differs."""
    from weightgraft import Graft

    recipient, _ = pair(arch)
    grafter = grafter_for(arch)
    counts = unit_counts(recipient.config)
    ids = torch.tensor([[5, 17, 33, 9, 61, 2]])
    heads = counts["o"][0]
    whole = grafter.logits(ids, Graft("last", "all", "o"))
    assert torch.equal(whole, grafter.logits(ids, Graft("last", "all", "o", heads=range(heads))))
    halves = [
        Graft("last", "all", "o", heads=range(heads // 2)),
        Graft("last", "all", "o", heads=range(heads // 2, heads)),
    ]
    assert torch.equal(whole, grafter.logits(ids, halves))
    assert max_diff(whole, grafter.logits(ids, halves[0])) > 1e-3
    ffn = "mlp"
    neurons = counts["down"][0]
    whole = grafter.logits(ids, Graft("all", -1, ffn))
    assert torch.equal(whole, grafter.logits(ids, Graft("all", -1, ffn, neurons=range(neurons))))
    assert max_diff(whole, grafter.logits(ids, Graft("all", -1, ffn, neurons=range(neurons - 1)))) > 1e-4


def test_bad_unit_input_names_the_fix():
    from weightgraft import Graft
    from weightgraft.engine.units import UnitError
    from weightgraft.errors import UserError

    grafter = grafter_for("llama")
    ids = torch.tensor([[5, 17, 33]])
    with pytest.raises(UnitError, match=r"4 query heads \(q, o: 0..3\) and 2 key-value heads \(k, v: 0..1\)"):
        grafter.logits(ids, Graft("last", "all", "k", heads=[2]))
    with pytest.raises(UnitError, match="48 neurons"):
        grafter.logits(ids, Graft("last", "all", "down", neurons=[48]))
    with pytest.raises(UnitError, match=r"\['ln1'\] have no heads"):
        Graft("last", "all", ["o", "ln1"], heads=[0])
    with pytest.raises(UnitError, match="not FFN components"):
        Graft("last", "all", "o", neurons=[0])
    with pytest.raises(UnitError, match="heads=, neurons= or experts=, not both"):
        Graft("last", "all", "o", heads=[0], neurons=[1])
    with pytest.raises(UnitError, match="int >= 0"):
        Graft("last", "all", "o", heads=[-1])
    assert issubclass(UnitError, UserError)


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_head_sweep_in_one_call_equals_one_call_per_condition(arch):
    """A head x layer sweep at the last token, every condition a row of one batch (prefix and
    layer sharing at work), equals each condition run alone (sharing reorders float32 sums:
    ATOL)."""
    from weightgraft import Graft

    recipient, _ = pair(arch)
    grafter = grafter_for(arch)
    heads = unit_counts(recipient.config)["o"][0]
    prompts = torch.tensor([[5, 17, 33, 9, 61, 2], [8, 120, 4, 4, 90, 13]])
    conditions = [
        Graft("last", [layer], "o", heads=[h]) for layer in range(num_layers(recipient)) for h in range(heads)
    ]
    swept = grafter.last_logits(prompts.repeat_interleave(len(conditions), 0), row_grafts=conditions * 2)
    alone = torch.stack([grafter.last_logits(prompts, grafts=c) for c in conditions], dim=1).reshape(swept.shape)
    assert max_diff(swept, alone) < ATOL
    assert max_diff(alone[0], alone[1]) > 1e-3  # the conditions differ


def test_many_unit_grafts_meeting_at_a_position_are_their_union():
    """70 one-neuron grafts of one row (more sets than a bit pattern would hold) meet at the last
    token: the same masks as one graft of the 70 neurons, so the same computation."""
    from weightgraft import Graft

    grafter = grafter_for("gpt2")  # 128 FFN neurons
    ids = torch.tensor([[5, 17, 33, 9, 61, 2], [8, 120, 4, 4, 90, 13]])
    chosen = list(range(1, 128))
    one_by_one = [Graft("last", "all", "down", neurons=[n]) for n in chosen[:70]]
    spread = [Graft([1], "all", "down", neurons=[3])]  # another position, another set
    together = grafter.logits(ids, row_grafts=[one_by_one + spread, spread])
    union = grafter.logits(ids, row_grafts=[[Graft("last", "all", "down", neurons=chosen[:70]), *spread], spread])
    assert torch.equal(together, union)
    assert max_diff(together[0], grafter.logits(ids[:1], spread)[0]) > 1e-3
