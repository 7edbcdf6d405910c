"""Bad or ambiguous input is a clear error at the call: positions, model configs, input tensors,
generation settings, and donors that are the recipient or mix dtypes."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest
import torch
import transformers as hf

from engine_fixtures import (
    ATOL,
    grafter_for,
    max_diff,
    pair,
    random_prompt,
)
from reference_grafter import GraftSpec, reference_logits
from tiny_model_fixtures import make_config

# ----------------------------------------------------------------------------------------------
# Positions: boolean arrays are masks, integer arrays are positions, anything else is an error
# ----------------------------------------------------------------------------------------------


def test_numpy_and_torch_boolean_masks_are_masks():
    from weightgraft import Graft

    recipient, donor = pair("llama")
    grafter = grafter_for("llama")
    ids = torch.tensor([random_prompt(random.Random(0), 5)])
    want = reference_logits(recipient, donor, ids[0], GraftSpec([1, 3], "all", "mlp"))
    flags = [False, True, False, True, False]
    for positions in [
        np.array(flags),
        torch.tensor(flags),
        flags,
        [np.bool_(f) for f in flags],
        np.array([1, 3]),
        torch.tensor([1, 3]),
        [np.int64(1), 3],
        np.array([-4, -2], dtype=np.int8),
    ]:
        got = grafter.logits(ids, grafts=Graft(positions, "all", "mlp"))[0]
        assert max_diff(got, want) < ATOL, f"positions {positions!r} read wrongly"
    one = grafter.logits(ids, grafts=Graft(np.int64(3), "all", "mlp"))[0]
    assert max_diff(one, grafter.logits(ids, grafts=Graft(3, "all", "mlp"))[0]) == 0


@pytest.mark.parametrize("positions, kind, message", [
    ([0.0, 1.0], TypeError, r"entries \[0.0, 1.0\] are not all ints or all bools"),
    (np.array([0.5, 1.0]), TypeError, "array of dtype float64"),
    (torch.tensor([0.0, 2.0]), TypeError, "array of dtype float32"),
    (1.0, TypeError, "got float"),
    ([[0, 1]], TypeError, "not all ints or all bools"),
    ([True, 1], TypeError, "not all ints or all bools"),
    (True, TypeError, "bare bool"),
    (np.array([[True, False]]), ValueError, r"shape \(1, 2\)"),
    ("first", ValueError, "got the string 'first'"),
    ({0, 1}, TypeError, "got set"),
    (slice(0.5, 2), TypeError, "non-integer bound"),
])  # fmt: skip
def test_other_positions_are_errors_at_construction(positions, kind, message):
    from weightgraft import Graft

    with pytest.raises(kind, match=message):
        Graft(positions)


@pytest.mark.parametrize("layers", [[True, False], 1.0, [0, 1.5], np.array([0.0, 1.0]), torch.tensor([True]), None])
def test_layers_that_are_not_ints_are_errors(layers):
    from weightgraft import Graft

    with pytest.raises(TypeError, match="layers must be 'all', a band name, an int or a sequence of ints"):
        Graft("last", layers)


@pytest.mark.parametrize("layers", [[], (), np.array([], dtype=int), torch.tensor([], dtype=torch.long), range(0)])
def test_a_graft_of_no_layers_is_an_error_not_a_silent_no_op(layers):
    from weightgraft import Graft

    with pytest.raises(ValueError, match="Graft layers is empty, so the graft would change nothing"):
        Graft("last", layers)


def test_a_run_config_with_empty_layers_is_refused_when_read():
    import weightgraft.paper.presets  # noqa: F401 - the presets the config type validates against
    from weightgraft.experiments.config import ConfigError, parse_config

    condition = {"name": "c", "grafts": [{"positions": "FE", "layers": []}]}
    experiment = {"name": "e", "dataset": "d", "recipient": "pre", "donor": "sft", "conditions": [condition]}
    body = {"name": "t", "models": {"pre": "a/b", "sft": "c/d"}, "datasets": {"d": "x"}, "experiments": [experiment]}
    with pytest.raises(ConfigError, match=r"layers: \[\] names no layer, so the graft would change nothing"):
        parse_config(body)


def test_layers_as_arrays_and_tensors_of_ints_work():
    from weightgraft import Graft

    for layers in [np.array([0, 2]), torch.tensor([0, 2]), (0, np.int32(2)), range(0, 3, 2)]:
        assert Graft("last", layers).layer_indices(4) == [0, 2]


# ----------------------------------------------------------------------------------------------
# Configs: every field that changes the computation must agree, unless explicitly allowed
# ----------------------------------------------------------------------------------------------


def _variant(arch: str, **changes):
    """A random-weight model of `arch` whose config differs by `changes`."""
    config = make_config(arch)
    fields = {**config.to_dict(), **changes}
    fields.pop("model_type", None)
    new = type(config)(**fields)
    new._attn_implementation = "eager"
    torch.manual_seed(11)
    return hf.AutoModelForCausalLM.from_config(new, attn_implementation="eager").eval()


CONFIG_CASES = [
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}},
     "rope_parameters.rope_theta: recipient 10000.0, donor 500000.0", "rope_theta"),
    ("llama", {"hidden_act": "gelu"}, "hidden_act: recipient 'silu', donor 'gelu'", "hidden_act"),
    ("llama", {"rms_norm_eps": 1e-3}, "rms_norm_eps: recipient 1e-06, donor 0.001", "rms_norm_eps"),
    # same parameter shapes: 4 heads x 8 = 2 heads x 16, and 2 kv heads x 8 = 1 x 16
    ("llama", {"num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16},
     "head_dim: recipient 8, donor 16; num_attention_heads: recipient 4, donor 2; "
     "num_key_value_heads: recipient 2, donor 1", "head_dim"),
    ("gemma2", {"attn_logit_softcapping": 10.0}, "attn_logit_softcapping: recipient 50.0, donor 10.0",
     "attn_logit_softcapping"),
    ("gemma2", {"sliding_window": 7}, "sliding_window: recipient 5, donor 7", "sliding_window"),
    ("gpt_neox", {"use_parallel_residual": False}, "use_parallel_residual: recipient True, donor False",
     "use_parallel_residual"),
    ("gpt_neox", {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
     "rope_parameters.partial_rotary_factor: recipient 0.25, donor 0.5", "rope_parameters"),
    ("gpt2", {"layer_norm_epsilon": 1e-3}, "layer_norm_epsilon: recipient 1e-05, donor 0.001", "layer_norm_epsilon"),
    ("gpt2", {"activation_function": "relu"}, "activation_function: recipient 'gelu_new', donor 'relu'",
     "activation_function"),
    ("mistral", {"sliding_window": 3}, "sliding_window: recipient 6, donor 3", "sliding_window"),
]  # fmt: skip


@pytest.mark.parametrize("arch, changes, listed, allow", CONFIG_CASES)
def test_config_differences_beyond_shapes_are_refused_unless_allowed(arch, changes, listed, allow):
    from weightgraft import Grafter

    recipient, _ = pair(arch)
    donor = _variant(arch, **changes)
    shapes = {n: p.shape for n, p in recipient.named_parameters()}
    assert shapes == {n: p.shape for n, p in donor.named_parameters()}, "the case must keep every shape"
    with pytest.raises(ValueError, match="configs that differ in fields that change the computation") as info:
        Grafter(recipient, donor)
    assert listed in str(info.value)
    assert "allow_config_differences=(" in str(info.value)
    fields = [f.split(":")[0] for f in listed.split("; ")]
    Grafter(recipient, donor, allow_config_differences=tuple(fields))  # the fields as the error names them
    Grafter(recipient, donor, allow_config_differences=[allow] + fields[1:])  # or a leaf or parent name


def test_fields_that_do_not_change_the_computation_are_not_compared():
    from weightgraft import Grafter

    recipient, _ = pair("llama")
    donor = _variant(
        "llama",
        _name_or_path="somewhere/else",
        use_cache=False,
        attention_dropout=0.1,
        eos_token_id=7,
        initializer_range=0.5,
        architectures=["LlamaForCausalLM"],
    )
    grafter = Grafter(recipient, donor)
    ids = torch.tensor([random_prompt(random.Random(1), 4)])
    assert max_diff(grafter.logits(ids, grafts=[]), recipient(ids).logits) < ATOL


def test_config_difference_names_the_donor_among_several():
    from weightgraft import Grafter

    recipient, donor = pair("llama")
    other = _variant("llama", rms_norm_eps=1e-3)
    with pytest.raises(ValueError, match="recipient and donor 'task' have configs that differ.*rms_norm_eps"):
        Grafter(recipient, donors={"sft": donor, "task": other})


# ----------------------------------------------------------------------------------------------
# Small API edges
# ----------------------------------------------------------------------------------------------


def test_float_input_ids_are_refused_not_truncated():
    grafter = grafter_for("gpt2")
    ids = torch.tensor([[3.7, 5.2, 9.9]])
    with pytest.raises(TypeError, match="input_ids must be integer token ids, got dtype torch.float32"):
        grafter.logits(ids)
    with pytest.raises(TypeError, match="got dtype torch.float32"):  # a list of Python floats
        grafter.last_logits([[1.0, 2.0]])
    with pytest.raises(TypeError, match="got dtype torch.bool"):
        grafter.generate(torch.ones(1, 3, dtype=torch.bool), max_new_tokens=1)


@pytest.mark.parametrize("keep", [-1, 1.5, True, "2"])
def test_logits_to_keep_must_be_a_count_of_positions(keep):
    grafter = grafter_for("gpt2")
    with pytest.raises(ValueError, match=r"logits_to_keep must be an int >= 0 \(0: every position\)"):
        grafter.logits(torch.tensor([[3, 5, 9]]), logits_to_keep=keep)


def test_logits_to_keep_beyond_the_sequence_keeps_every_position():
    from weightgraft import Graft

    grafter = grafter_for("gpt2")
    ids = torch.tensor([[3, 5, 9], [4, 6, 8]])
    full = grafter.logits(ids, grafts=Graft(-1, "all", "mlp"))
    assert torch.equal(grafter.logits(ids, grafts=Graft(-1, "all", "mlp"), logits_to_keep=10), full)
    last_two = grafter.logits(ids, grafts=Graft(-1, "all", "mlp"), logits_to_keep=2)
    assert last_two.shape == (2, 2, full.shape[-1])
    # the same pass; only the unembedding's matmul sees fewer rows (a BLAS may block them differently)
    assert (last_two - full[:, -2:]).abs().max().item() < 1e-6


def test_attention_mask_values_other_than_zero_and_one_are_refused():
    grafter = grafter_for("gpt2")
    ids = torch.tensor([[3, 5, 9], [4, 6, 8]])
    for bad, found in [
        (torch.tensor([[1, 1, 2], [1, 1, 1]]), r"\[2.0\]"),
        (torch.tensor([[0.5, 1, 1], [1, 1, 1]]), r"\[0.5\]"),
        (torch.tensor([[-1, 1, 1], [1, 1, 1]]), r"\[-1.0\]"),
    ]:
        with pytest.raises(ValueError, match=f"attention_mask must hold only 0 .* and 1 .*, found {found}"):
            grafter.logits(ids, attention_mask=bad)
    ok = grafter.logits(ids, attention_mask=torch.tensor([[True, True, True], [False, True, True]]))
    assert ok.shape == (2, 3, 151)


def test_grafting_a_model_into_itself_is_refused():
    from weightgraft import Grafter

    recipient, _ = pair("gpt2")
    with pytest.raises(
        ValueError, match="the donor is the recipient itself: grafting a model into itself changes nothing"
    ):
        Grafter(recipient, recipient)
    Grafter(recipient, copy.deepcopy(recipient))  # a separate copy is fine


@pytest.mark.parametrize("settings, message", [
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
    ({"top_p": -0.1}, r"top_p must be in \(0, 1\]"),
    ({"top_k": 0}, "top_k must be a positive int"),
    ({"top_k": -3}, "top_k must be a positive int"),
    ({"top_k": 2.5}, "top_k must be a positive int"),
    ({"max_new_tokens": -1}, "max_new_tokens must be an int >= 0"),
    ({"temperature": 0.0}, "temperature must be > 0 when sampling"),
])  # fmt: skip
def test_generation_settings_are_checked_at_the_call(settings, message):
    grafter = grafter_for("llama")
    ids = torch.tensor([random_prompt(random.Random(2), 4)])
    with pytest.raises(ValueError, match=message):
        grafter.generate(ids, do_sample=True, generator=torch.Generator().manual_seed(0), **settings)


def test_generation_settings_at_their_limits_work():
    grafter = grafter_for("llama")
    ids = torch.tensor([random_prompt(random.Random(2), 4)])
    assert torch.equal(grafter.generate(ids, max_new_tokens=0), ids)
    greedy = grafter.generate(ids, max_new_tokens=3)
    # top_k=1 and a tiny top_p keep only the most likely token: sampling is then greedy
    for settings in [{"top_k": 1}, {"top_p": 1e-6}]:
        sampled = grafter.generate(
            ids, max_new_tokens=3, do_sample=True, **settings, generator=torch.Generator().manual_seed(0)
        )
        assert torch.equal(sampled, greedy), settings
    assert grafter.generate(
        ids, max_new_tokens=3, do_sample=True, top_p=1.0, generator=torch.Generator().manual_seed(0)
    ).shape == (1, 7)


def test_a_donor_with_mixed_dtypes_is_refused_naming_the_parameters():
    from weightgraft import Grafter

    recipient, donor = pair("llama")
    mixed = copy.deepcopy(donor)
    mixed.model.layers[1].mlp.up_proj.double()
    with pytest.raises(
        ValueError,
        match=r"model\.layers\.1\.mlp\.up_proj\.weight \(recipient torch\.float32, "
        r"donor torch\.float64\).*donor\.to\(torch\.float32\)",
    ):
        Grafter(recipient, mixed)
