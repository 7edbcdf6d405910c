"""What inference decides for models that need more than rows: the 'whole' call form of a position
embedding that reads the attention mask (OPT, BioGPT), the 'flat' form of modules a block calls on
flat tokens (OPT's MLP and norm), a shared MLP beside a MoE block (GraniteMoeShared); and the
one-line refusals of the OPT variants no canonical component describes."""

from __future__ import annotations

import dataclasses

import pytest

from inferred_fixtures import make_model, pair


def test_opt_layout():
    from weightgraft.adapters import adapter_for

    adapter = adapter_for(pair("opt")[0])
    assert adapter.origin == "inferred"
    assert dict(adapter.model_call_forms) == {"model.decoder.embed_positions": "whole"}
    assert adapter.model_level["pos_embed"] == "model.decoder.embed_positions"
    assert dict(adapter.call_forms) == {"fc1": "flat", "fc2": "flat", "final_layer_norm": "flat"}
    assert (adapter.per_layer["up"], adapter.per_layer["down"], adapter.per_layer["ln2"]) == (
        "fc1",
        "fc2",
        "final_layer_norm",
    )


def test_biogpt_layout():
    from weightgraft.adapters import adapter_for

    adapter = adapter_for(pair("biogpt")[0])
    assert dict(adapter.model_call_forms) == {"biogpt.embed_positions": "whole"}
    assert dict(adapter.call_forms) == {}  # BioGPT's MLP keeps [batch, seq, ...]


def test_shared_mlp_beside_moe_block():
    from weightgraft.adapters import adapter_for

    adapter = adapter_for(pair("granitemoeshared")[0])
    assert adapter.per_layer["shared_expert"] == "shared_mlp"
    assert adapter.per_layer["router"] == "block_sparse_moe.router"
    assert adapter.per_layer["experts"] == "block_sparse_moe.experts"
    assert adapter.mlp_module == ""  # the MoE block and the shared MLP: no one module
    assert adapter.group("mlp") == ("router", "experts", "shared_expert")
    assert "shared_mlp" not in adapter.call_forms  # called on [batch, seq, hidden]: rows


@pytest.mark.parametrize("kind", ["opt", "biogpt"])
def test_check_catches_rows_position_embedding(kind):
    """Declared 'rows', the mask-reading position embedding crashes on rows: the check says so
    and names the 'whole' form to declare."""
    from weightgraft.adapters import AdapterError, adapter_for, check_adapter

    recipient = pair(kind)[0]
    wrong = dataclasses.replace(adapter_for(recipient), model_call_forms={})
    with pytest.raises(AdapterError, match="embed_positions.*'whole'"):
        check_adapter(recipient, wrong)
    check_adapter(recipient, adapter_for(recipient))


def test_model_call_forms_must_name_model_level_paths():
    from weightgraft.adapters import adapter_for

    adapter = adapter_for(pair("opt")[0])
    with pytest.raises(ValueError, match="not model_level paths"):
        dataclasses.replace(adapter, model_call_forms={"model.decoder.nowhere": "whole"})
    with pytest.raises(ValueError, match="unknown call forms"):
        dataclasses.replace(adapter, model_call_forms={"model.decoder.embed_positions": "sideways"})


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (dict(word_embed_proj_dim=16), "project_out"),  # a projection between embedding and block widths
        (dict(do_layer_norm_before=False), "self_attn_layer_norm"),  # post-LN: a norm after the residual add
    ],
)
def test_opt_variants_refused_in_one_line(overrides, named):
    from weightgraft.adapters import AdapterError, adapter_for

    with pytest.raises(AdapterError) as caught:
        adapter_for(make_model("opt", 5, **overrides))
    message = str(caught.value)
    assert named in message and "\n" not in message


def test_llama4_experts_are_per_expert():
    """Llama 4 feeds its experts every token once per expert, expert-major: 'per_expert'."""
    from weightgraft.adapters import adapter_for

    adapter = adapter_for(pair("llama4_text")[0])
    assert adapter.per_layer["experts"] == "feed_forward.experts"
    assert adapter.call_forms["feed_forward.experts"] == "per_expert"
    assert adapter.call_forms["feed_forward.router"] == "flat"


def test_check_catches_flat_llama4_experts():
    from weightgraft.adapters import AdapterError, adapter_for, check_adapter

    recipient = pair("llama4_text")[0]
    adapter = adapter_for(recipient)
    wrong = dataclasses.replace(adapter, call_forms={**adapter.call_forms, "feed_forward.experts": "flat"})
    with pytest.raises(AdapterError, match="feed_forward.experts"):
        check_adapter(recipient, wrong)
