"""`check_adapter(model, adapter)`: silent on every shipped architecture's tiny model, and on a
broken adapter one `AdapterError` that names each problem (the path, the parameter, the split)
and its fix."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import transformers as hf

from tiny_model_fixtures import ARCHS, make_config, make_model
from weightgraft.adapters import AdapterError, Part, adapter_for, check_adapter, contiguous_split
from weightgraft.errors import UserError


@pytest.mark.parametrize("arch", ARCHS)
def test_every_shipped_adapter_fits_its_tiny_model(arch):
    model = make_model(arch, seed=0)
    model.train()  # the check runs in eval mode and gives the model back as it was
    before = {name: p.clone() for name, p in model.state_dict().items()}
    assert check_adapter(model) is None
    assert check_adapter(model, adapter_for(model)) is None
    assert model.training
    assert all(torch.equal(before[name], p) for name, p in model.state_dict().items())


def _problems(model, adapter) -> str:
    with pytest.raises(AdapterError) as caught:
        check_adapter(model, adapter)
    message = str(caught.value)
    assert "\n" not in message, "one line, for the CLI"
    return message


def test_a_wrong_path_is_named_with_its_fix():
    model = make_model("llama", seed=0)
    good = adapter_for(model)
    broken = dataclasses.replace(
        good,
        per_layer={**good.per_layer, "q": "self_attn.q_prj"},
        model_level={**good.model_level, "ln_final": "model.final_norm"},
    )
    message = _problems(model, broken)
    assert "(2 problem(s))" in message
    assert "per_layer['q']='self_attn.q_prj' is not a module of any decoder block" in message
    assert "model_level['ln_final']='model.final_norm' is not a module of this model; fix the path" in message
    bad_layers = dataclasses.replace(good, layers="model.blocks")
    assert "layers='model.blocks' is not a module of this model" in _problems(model, bad_layers)


def test_a_missed_parameter_is_named_with_its_fix():
    model = make_model("llama", seed=0)
    good = adapter_for(model)
    broken = dataclasses.replace(good, per_layer={c: r for c, r in good.per_layer.items() if c != "ln2"})
    message = _problems(model, broken)
    expected = [f"model.layers.{i}.post_attention_layernorm.weight" for i in range(model.config.num_hidden_layers)]
    assert f"parameters {expected} belong to no component; add the modules that hold them" in message
    assert "(1 problem(s))" in message


def test_a_parameter_owned_twice_is_named():
    model = make_model("llama", seed=0)
    good = adapter_for(model)
    # The whole MLP as a norm-named component, besides gate/up/down inside it.
    broken = dataclasses.replace(good, per_layer={**good.per_layer, "post_mlp_norm": "mlp"})
    message = _problems(model, broken)
    assert "'model.layers.0.mlp.down_proj.weight'" in message
    assert "belong to two components (one module path lies inside another)" in message


def test_a_split_that_does_not_add_up_is_named_with_the_widths():
    model = make_model("gpt2", seed=0)
    good = adapter_for(model)
    d = model.config.hidden_size

    def short(config):  # v one feature short: 3d - 1 features for a 3d-wide c_attn
        return contiguous_split({"q": d, "k": d, "v": d - 1})

    message = _problems(model, dataclasses.replace(good, splits={"attn.c_attn": short}))
    assert (
        f"the split of 'attn.c_attn' does not give each of its {3 * d} output features to exactly one part "
        f"(parts {{'q': {d}, 'k': {d}, 'v': {d - 1}}}, {3 * d - 1} features in all)"
    ) in message

    def with_extra(config):  # an extra part no component names
        return {**contiguous_split({"q": d, "k": d, "v": d}), "w": torch.arange(0)}

    message = _problems(model, dataclasses.replace(good, splits={"attn.c_attn": with_extra}))
    assert "the split of 'attn.c_attn' gives part(s) ['w'], which no component names" in message

    missing_part = {**good.per_layer, "v": Part("attn.c_attn", "value")}
    message = _problems(model, dataclasses.replace(good, per_layer=missing_part))
    assert "components name part(s) ['value'] of 'attn.c_attn', which its split rule does not give" in message
    assert "gives part(s) ['v'], which no component names" in message


def test_several_problems_in_one_message():
    model = make_model("gpt2", seed=0)
    good = adapter_for(model)
    d = model.config.hidden_size
    broken = dataclasses.replace(
        good,
        per_layer={c: r for c, r in good.per_layer.items() if c != "ln1"},
        splits={"attn.c_attn": lambda config: contiguous_split({"q": d, "k": d, "v": 2 * d})},
    )
    message = _problems(model, broken)
    assert message.startswith("the gpt2 adapter does not fit this model (2 problem(s)): (1) parameters [")
    assert "'transformer.h.0.ln_1.weight'" in message and "(2) the split of 'attn.c_attn'" in message


def test_a_module_off_the_sequence_axis_needs_seq_dims():
    model = make_model("gemma3_text", seed=0)
    good = adapter_for(model)
    assert good.seq_dims  # the shipped adapter declares q/k norms' axis, and passes
    message = _problems(model, dataclasses.replace(good, seq_dims={}))
    assert "'model.layers.0.self_attn.q_norm' maps (1, 4, 3, 8) to (1, 4, 3, 8) on a [1, 3] input" in message
    assert "declare its sequence axis in seq_dims" in message
    whole_attention = dataclasses.replace(good, per_layer={**good.per_layer, "o": "self_attn"})
    assert "'model.layers.0.self_attn' does not map a tensor to a tensor" in _problems(model, whole_attention)


def test_the_error_is_a_user_error_and_meta_models_are_refused():
    assert issubclass(AdapterError, UserError) and issubclass(AdapterError, ValueError)
    with torch.device("meta"):
        model = hf.AutoModelForCausalLM.from_config(make_config("llama"), attn_implementation="eager")
    assert "the model is on the meta device; load it with weights" in _problems(model, adapter_for(model))


def test_a_hand_written_chain_is_checked_and_grafts_as_its_modules():
    """A chain (Qwen3's q as q_proj then q_norm: a tuple of modules) is checked module by module,
    and grafting it equals grafting q and q_norm of the shipped adapter; an empty chain is
    refused when built."""
    from weightgraft import Graft, Grafter
    from weightgraft.adapters import register_adapter

    model, donor = make_model("qwen3", seed=0), make_model("qwen3", seed=1)
    good = adapter_for(model)
    ids = torch.tensor([[3, 9, 4, 7, 1]])
    want = Grafter(model, donor).logits(ids, grafts=Graft([1, 3], 0, ["q", "q_norm"]))
    layer = {c: r for c, r in good.per_layer.items() if c != "q_norm"}
    chained = dataclasses.replace(good, per_layer=layer | {"q": ("self_attn.q_proj", "self_attn.q_norm")})
    check_adapter(model, chained)
    broken = dataclasses.replace(chained, per_layer={**chained.per_layer, "q": ("self_attn.q_prj", "self_attn.q_norm")})
    assert "per_layer['q']='self_attn.q_prj' is not a module of any decoder block" in _problems(model, broken)
    with pytest.raises(ValueError, match="empty chain"):
        dataclasses.replace(chained, per_layer={**chained.per_layer, "q": ()})
    register_adapter(chained, replace=True)
    try:
        got = Grafter(model, donor).logits(ids, grafts=Graft([1, 3], 0, "q"))
    finally:
        register_adapter(good, replace=True)
    assert torch.equal(got, want)
    assert not torch.equal(got, Grafter(model, donor).logits(ids, grafts=Graft([1, 3], 0, "q")))
