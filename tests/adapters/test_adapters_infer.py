"""Adapter inference: the registered tables found again by behaviour, a model no one registered
grafted exactly (against the independent reference), aliases, and refusals that name the cause."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import ATOL, max_diff, pad_batch, random_prompt, random_specs, real_slice, stable_seed, to_grafts
from reference_grafter import GraftSpec, leaf_components, reference_logits
from tiny_model_fixtures import ARCHS, make_pair
from toy_decoder import make_toy_pair


@pytest.mark.parametrize("arch", ARCHS)
def test_inference_finds_every_registered_table(arch):
    """Same layer stack, model-level paths, per-layer paths, fused parts with their columns,
    sequence axes and attention/MLP submodules as the hand-written adapter."""
    from weightgraft.adapters import infer_adapter
    from weightgraft.adapters.base import registered_adapter
    from weightgraft.adapters.infer import same_table

    recipient, _ = make_pair(arch, 0)
    inferred = infer_adapter(recipient)
    registered = registered_adapter(recipient)
    assert inferred.origin == "inferred"
    assert same_table(inferred, registered, recipient.config.get_text_config()), (
        f"{arch}: inferred {dict(inferred.per_layer)} {dict(inferred.model_level)} {dict(inferred.seq_dims)}, "
        f"registered {dict(registered.per_layer)} {dict(registered.model_level)} {dict(registered.seq_dims)}"
    )


def test_a_renamed_model_of_an_unknown_type_is_inferred():
    from weightgraft.adapters import adapter_for
    from weightgraft.adapters.base import registered_adapter

    recipient, _ = make_toy_pair()
    assert registered_adapter(recipient) is None
    adapter = adapter_for(recipient)
    assert adapter.origin == "inferred" and adapter.layers == "trunk.cells"
    assert dict(adapter.model_level) == {
        "embed": "trunk.words",
        "pos_embed": "trunk.where",
        "ln_final": "trunk.last_scale",
        "lm_head": "reader",
    }
    assert dict(adapter.per_layer) == {
        "q": "mix.ask",
        "k": "mix.offer",
        "v": "mix.carry",
        "o": "mix.emit",
        "gate": "feed.valve",
        "up": "feed.widen",
        "down": "feed.narrow",
        "ln1": "pre_mix",
        "ln2": "pre_feed",
    }


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_renamed_model_grafts_as_the_reference_does(seed):
    """Random position x layer x component grafts, rows of their own lengths, left-padded: the
    engine on the inferred adapter against the per-token reference (its table written by hand)."""
    from weightgraft import Grafter

    recipient, donor = make_toy_pair(seed)
    grafter = Grafter(recipient, donor)
    rng = random.Random(stable_seed("toy", seed))
    lengths = [rng.randrange(4, 10) for _ in range(3)]
    rows = [random_prompt(rng, n) for n in lengths]
    specs = [random_specs(rng, recipient.config, n) for n in lengths]
    ids, mask = pad_batch(rows, "left")
    got = grafter.logits(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
    for b, (row, spec) in enumerate(zip(rows, specs)):
        want = reference_logits(recipient, donor, torch.tensor(row), spec)
        assert max_diff(got[b, real_slice(mask[b])], want) < ATOL, f"row {b}: {spec}"


def test_every_component_of_the_renamed_model_matters_and_is_exact():
    """Each leaf component alone at two positions of one layer: exact, and it changes the logits."""
    from weightgraft import Grafter

    recipient, donor = make_toy_pair(3)
    grafter = Grafter(recipient, donor)
    row = random_prompt(random.Random(5), 7)
    plain = reference_logits(recipient, donor, torch.tensor(row), None)
    for component in leaf_components(recipient.config):
        spec = GraftSpec([1, -1], 1, component)
        got = grafter.logits(torch.tensor([row]), grafts=to_grafts(spec))[0]
        want = reference_logits(recipient, donor, torch.tensor(row), spec)
        assert max_diff(got, want) < ATOL, component
        assert max_diff(got, plain) > 1e-3, f"grafting {component} changed nothing"


def test_a_parameter_no_component_takes_is_refused_by_name():
    from weightgraft.adapters import AdapterError, adapter_for

    recipient, _ = make_toy_pair(extra_parameter=True)
    with pytest.raises(AdapterError, match=r"mix\.temperature"):
        adapter_for(recipient)


def _tiny(config_class, **extra):
    import transformers as hf

    config = getattr(hf, config_class)(
        vocab_size=151,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
        **extra,
    )
    torch.manual_seed(0)
    model = hf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    return model.eval()


def test_a_llama_under_another_name_uses_the_llama_adapter():
    """Ministral's module table is Llama's: the registered adapter is used, recorded as an alias,
    and grafting everything reproduces the donor."""
    import transformers as hf

    from weightgraft import Graft, Grafter
    from weightgraft.adapters import adapter_for

    if not hasattr(hf, "MinistralConfig"):
        pytest.skip("this transformers has no Ministral")
    recipient, donor = _tiny("MinistralConfig"), _tiny("MinistralConfig")
    torch.manual_seed(1)
    with torch.no_grad():
        for param in donor.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    adapter = adapter_for(recipient)
    assert adapter.origin == "alias of llama" and adapter.per_layer["ln2"] == "post_attention_layernorm"
    ids = torch.tensor([random_prompt(random.Random(2), 6)])
    with torch.no_grad():
        assert max_diff(Grafter(recipient, donor).logits(ids, grafts=Graft()), donor(ids).logits) < ATOL


def test_inference_from_a_config_alone():
    """What a run's plan has before loading weights: the config. Inference builds a two-block copy."""
    from weightgraft.adapters import adapter_for
    from weightgraft.adapters.infer import same_table

    recipient, _ = make_toy_pair()
    from_config = adapter_for(recipient.config)
    assert same_table(from_config, adapter_for(recipient), recipient.config)


def test_a_padded_batch_through_the_inferred_adapter_with_several_donors():
    from weightgraft import Graft, Grafter

    recipient, donor = make_toy_pair(4)
    _, other = make_toy_pair(5)
    grafter = Grafter(recipient, donors={"a": donor, "b": other})
    rows = [random_prompt(random.Random(9), 5), random_prompt(random.Random(10), 8)]
    ids, mask = pad_batch(rows, "left")
    grafts = [Graft("last", "all", "attn", donor="a"), Graft("last", "all", "mlp", donor="b")]
    got = grafter.logits(ids, grafts=grafts, attention_mask=mask)
    specs = [GraftSpec("last", "all", "attn", donor="a"), GraftSpec("last", "all", "mlp", donor="b")]
    for b, row in enumerate(rows):
        want = reference_logits(recipient, {"a": donor, "b": other}, torch.tensor(row), specs)
        assert max_diff(got[b, real_slice(mask[b])], want) < ATOL
