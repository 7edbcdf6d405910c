"""The census's model factory: every causal-LM type gets a tiny config, a model and a family.

`census_models` (tests/support) is what the architecture census of issue 38 stands on: if a
decoder type's tiny model did not build, run on a left-padded batch, stay tiny, or had a donor
equal to it somewhere, the census would measure the factory instead of weightgraft. The test over
every type is marked `census` (pyproject.toml); it runs in CI and takes about half a minute.
"""

from __future__ import annotations

import collections

import pytest
import torch
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

import census_models as cm

DECODER_FAMILIES = ("dense", "moe")


@pytest.fixture(scope="module")
def entries() -> dict[str, cm.CensusEntry]:
    """Every type classified once; the counts per family are printed (pytest -s shows them)."""
    found = {entry.model_type: entry for entry in cm.census()}
    counts = collections.Counter(entry.family for entry in found.values())
    print("\ncensus families:", dict(sorted(counts.items())), "of", len(found))
    for entry in found.values():
        if entry.family == "unbuildable":
            print(f"  unbuildable {entry.model_type}: {entry.reason}")
    return found


def test_census_types_are_the_causal_lm_mapping_sorted():
    types = cm.census_types()
    assert types == sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    assert {"llama", "gpt2", "mixtral", "mamba", "bert"} <= set(types)


@pytest.mark.parametrize(
    ("model_type", "width_field", "layers_field"),
    [("gpt2", "n_embd", "n_layer"), ("llama", "hidden_size", "num_hidden_layers"), ("bloom", "hidden_size", "n_layer")],
)
def test_tiny_config_sets_each_types_own_field_names(model_type, width_field, layers_field):
    config = cm.tiny_config(model_type)
    assert getattr(config, width_field) == 64
    assert getattr(config, layers_field) == cm.LAYERS
    assert config.vocab_size == cm.VOCAB
    assert config._attn_implementation == "eager"


@pytest.mark.parametrize("model_type", ["mixtral", "qwen3_moe", "deepseek_v3", "olmoe", "ernie4_5_moe"])
def test_tiny_moe_config_has_four_experts_two_per_token_and_no_dense_layer(model_type):
    model = cm.build_tiny(model_type)
    config = model.config
    experts = [getattr(config, name, None) for name in ("num_local_experts", "num_experts", "n_routed_experts")]
    assert 4 in experts
    assert config.num_experts_per_tok == 2
    _, blocks = cm.decoder_blocks(model)
    assert all(cm._experts_reason([block]) for block in blocks), "every block must hold experts"


def test_tiny_config_keeps_special_ids_inside_the_vocabulary():
    for model_type in ("llama", "gpt2", "qwen3", "deepseek_v3", "gemma3_text", "glm", "cwm"):
        config = cm.tiny_config(model_type)
        for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
            ids = getattr(config, name, None)
            for one in ids if isinstance(ids, list) else [ids]:
                assert one is None or 0 <= one < cm.VOCAB, (model_type, name, one)


def test_build_tiny_is_deterministic_and_noised():
    first, again, other = cm.build_tiny("llama", seed=3), cm.build_tiny("llama", seed=3), cm.build_tiny("llama", seed=4)
    for (name, a), b, c in zip(first.named_parameters(), again.parameters(), other.parameters(), strict=True):
        assert torch.equal(a, b), name
        assert not torch.equal(a, c), name
    norm = first.model.norm.weight
    assert not torch.allclose(norm, torch.ones_like(norm)), "norms must not stay at 1"
    assert not first.training


@pytest.mark.parametrize(
    ("model_type", "family"),
    [
        ("llama", "dense"),
        ("gpt2", "dense"),
        ("mixtral", "moe"),
        ("deepseek_v3", "moe"),
        ("mamba", "hybrid"),
        ("jamba", "hybrid"),
        ("bert", "encoder"),
        ("bart", "encoder"),
        ("gemma3", "multimodal"),
    ],
)
def test_classify_known_types(model_type, family):
    entry = cm.classify(model_type)
    assert (entry.model_type, entry.family) == (model_type, family), entry.reason


def test_a_type_that_cannot_be_built_is_unbuildable_with_a_one_line_reason(monkeypatch):
    def refuse(model_type, seed=0):
        raise ValueError("no tiny model\nsecond line")

    monkeypatch.setattr(cm, "build_tiny", refuse)
    entry = cm.classify("llama")
    assert entry == cm.CensusEntry("llama", "unbuildable", "ValueError: no tiny model")


@pytest.mark.census
@pytest.mark.parametrize("model_type", cm.census_types())
def test_every_decoder_type_builds_runs_and_has_a_differing_donor(model_type, entries):
    entry = entries[model_type]
    assert entry.family in cm.FAMILIES
    assert entry.reason and "\n" not in entry.reason
    if entry.family not in DECODER_FAMILIES:
        return  # the census records the others with their reason; only decoders are grafted
    model = cm.build_tiny(model_type, seed=1)
    path, blocks = cm.decoder_blocks(model)
    assert len(blocks) == cm.LAYERS, path
    assert sum(param.numel() for param in model.parameters()) < cm.MAX_PARAMETERS
    inputs = cm.probe_inputs()
    logits = cm.logits_of(model, inputs)
    assert logits.shape[:2] == (2, 7)
    assert torch.isfinite(logits).all()
    donor = cm.donor_of(model, seed=2)
    for (name, mine), theirs in zip(model.named_parameters(), donor.parameters(), strict=True):
        assert not torch.equal(mine, theirs), name
    assert not torch.allclose(cm.logits_of(donor, inputs), logits)


@pytest.mark.census
def test_census_finds_most_decoder_types(entries):
    """The issue counted 113 decoder-only attention types (69 dense, 44 MoE); a rule change that
    loses many of them would show here."""
    counts = collections.Counter(entry.family for entry in entries.values())
    assert counts["dense"] + counts["moe"] >= 105
    assert counts["moe"] >= 40
    assert sum(counts.values()) == len(cm.census_types())
