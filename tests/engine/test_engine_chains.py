"""Chain components: a component computed by several position-wise modules in sequence. BitNet's
o is (attn_sub_norm, o_proj) and its down (ffn_sub_norm, down_proj); Apertus' up is (up_proj,
act_fn), an activation with parameters; BLOOM's embed is (word_embeddings,
word_embeddings_layernorm), a model-level chain. The inferred adapters name the modeling files' chains,
and whole grafts, heads of o and neurons of down (each module's features of those units) equal
the independent per-token reference."""

from __future__ import annotations

import random
from functools import cache

import pytest
import torch

import census_models
from engine_fixtures import (
    ATOL,
    max_diff,
    pad_batch,
    random_positions,
    random_prompt,
    random_specs,
    real_slice,
    reference_rows,
    stable_seed,
    to_grafts,
)
from reference_grafter import GraftSpec, component_table, reference_unit_logits

ARCHS = ["bitnet", "apertus"]
CHAINS = {"bitnet": ["o", "down"], "apertus": ["up"]}


@cache
def _pair(arch: str):
    torch.manual_seed(0)
    recipient = census_models.build_tiny(arch, 0)
    return recipient, census_models.donor_of(recipient, 1)


@cache
def _grafter(arch: str):
    from weightgraft import Grafter

    return Grafter(*_pair(arch))


@pytest.mark.parametrize("arch", ARCHS)
def test_inferred_chains_are_the_modeling_files(arch):
    from weightgraft.adapters import adapter_for
    from weightgraft.adapters.base import chain_of

    recipient, _ = _pair(arch)
    adapter = adapter_for(recipient)
    layer, _, _ = component_table(recipient.config)
    assert adapter.origin == "inferred"
    assert {c: list(chain_of(e)) for c, e in adapter.per_layer.items()} == {
        c: [path for path, _ in pieces] for c, pieces in layer.items()
    }
    assert all(isinstance(adapter.per_layer[c], tuple) for c in CHAINS[arch])


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("arch", ARCHS)
def test_random_grafts_match_reference(arch, seed):
    recipient, donor = _pair(arch)
    rng = random.Random(stable_seed("chains", arch, seed))
    rows = [random_prompt(rng, rng.randrange(4, 9)) for _ in range(3)]
    ids, mask = pad_batch(rows, "left")
    layers = recipient.config.num_hidden_layers
    row_specs = [
        GraftSpec(random_positions(rng, len(rows[0])), rng.randrange(layers), CHAINS[arch]),
        GraftSpec("all", "all", [rng.choice(CHAINS[arch]), "q"]),
        random_specs(rng, recipient.config, len(rows[2])),
    ]
    got = _grafter(arch).logits(ids, row_grafts=[to_grafts(s) for s in row_specs], attention_mask=mask)
    want = reference_rows(recipient, donor, rows, row_specs)
    for b in range(len(rows)):
        diff = max_diff(got[b, real_slice(mask[b])], want[b])
        assert diff < ATOL, f"{arch} row {b}: {row_specs[b]}: max abs diff {diff:.3g}"


@pytest.mark.parametrize(
    "spec",
    [
        GraftSpec("last", 1, "o", heads=[1]),
        GraftSpec([0, 2], "all", "o", heads=[0, 3]),
        GraftSpec("all", 0, "down", neurons=[5, 17, 100]),
    ],
)
def test_units_of_a_sub_norm_chain_match_reference(spec):
    """Head h of BitNet's o: attn_sub_norm's weights at h's features and o_proj's columns of h."""
    from weightgraft import Graft

    recipient, donor = _pair("bitnet")
    row = random_prompt(random.Random(11), 6)
    graft = Graft(spec.positions, spec.layers, spec.components, heads=spec.heads, neurons=spec.neurons)
    got = _grafter("bitnet").logits(torch.tensor([row]), grafts=graft)[0]
    want = reference_unit_logits(recipient, donor, torch.tensor(row), spec)
    assert max_diff(got, want) < ATOL
    assert max_diff(got, recipient(torch.tensor([row])).logits[0]) > 1e-3


def test_neurons_of_an_activation_chain_are_refused_by_name():
    from weightgraft import Graft
    from weightgraft.engine.units import UnitError

    ids = torch.tensor([random_prompt(random.Random(2), 4)])
    with pytest.raises(UnitError, match="chain"):
        _grafter("apertus").logits(ids, grafts=Graft("last", 0, "up", neurons=[1]))


def test_bloom_embed_chain_matches_reference():
    """BLOOM's embed is (word_embeddings, word_embeddings_layernorm): a model-level chain."""
    from weightgraft.adapters import adapter_for

    recipient, donor = _pair("bloom")
    adapter = adapter_for(recipient)
    assert adapter.model_level["embed"] == ("transformer.word_embeddings", "transformer.word_embeddings_layernorm")
    rng = random.Random(stable_seed("bloom"))
    rows = [random_prompt(rng, rng.randrange(4, 9)) for _ in range(2)]
    ids, mask = pad_batch(rows, "left")
    row_specs = [GraftSpec([0, -1], "all", "embed"), GraftSpec(random_positions(rng, len(rows[1])), 1, ["embed", "q"])]
    got = _grafter("bloom").logits(ids, row_grafts=[to_grafts(s) for s in row_specs], attention_mask=mask)
    want = reference_rows(recipient, donor, rows, row_specs)
    for b in range(len(rows)):
        assert max_diff(got[b, real_slice(mask[b])], want[b]) < ATOL, row_specs[b]
