"""Models are never modified; tied embeddings stay separate; bad input gives clear errors."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import (
    ATOL,
    assert_unchanged,
    grafter_for,
    max_diff,
    pad_batch,
    pair,
    random_prompt,
    snapshot,
    to_grafts,
)
from reference_grafter import GraftSpec, reference_logits
from tiny_model_fixtures import TIED_ARCHS, make_model

# ----------------------------------------------------------------------------------------------
# Both models bit-identical before and after every call
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "gemma", "gemma3_text", "olmo2", "phi3", "llama_tied"])
def test_models_bit_identical_after_every_call(arch):
    recipient, donor = pair(arch)
    before = snapshot(recipient), snapshot(donor)

    def check(what):
        assert_unchanged(recipient, before[0], f"{arch} recipient after {what}")
        assert_unchanged(donor, before[1], f"{arch} donor after {what}")

    from weightgraft import Grafter

    grafter = Grafter(recipient, donor)
    check("Grafter()")
    rows = [random_prompt(random.Random(1), 6), random_prompt(random.Random(2), 4)]
    ids, mask = pad_batch(rows, "left")
    everything = to_grafts(GraftSpec("all", "all", "all"))
    mixed = [
        to_grafts([GraftSpec("last", "all", "all"), GraftSpec(0, 0, "embed")]),
        to_grafts(GraftSpec(slice(1, 3), "last_half", ["k", "up", "lm_head"])),
    ]
    out = grafter.logits(ids, grafts=everything, attention_mask=mask)
    assert not out.requires_grad, "logits should come from torch.no_grad()"
    check("logits")
    grafter.logits(ids, row_grafts=mixed, attention_mask=mask)
    check("logits(row_grafts)")
    grafter.last_logits(ids, row_grafts=mixed, attention_mask=mask)
    check("last_logits")
    for generated in ["none", "last"]:
        grafter.generate(ids, row_grafts=mixed, attention_mask=mask, max_new_tokens=3, generated=generated)
        check(f"generate(generated={generated!r})")
    grafter.generate(
        ids,
        grafts=everything,
        attention_mask=mask,
        max_new_tokens=3,
        do_sample=True,
        generator=torch.Generator().manual_seed(0),
    )
    check("generate(do_sample=True)")
    for bad, message in [
        (lambda: grafter.logits(ids, grafts=to_grafts(GraftSpec(7, "all", "all")), attention_mask=mask),
         "position 7 is outside a row of 6 real tokens"),
        (lambda: grafter.logits(ids, grafts=to_grafts(GraftSpec("all", "all", "nonsense"))),
         r"unknown component\(s\) \['nonsense'\]"),
        (lambda: grafter.logits(ids, grafts=everything, row_grafts=mixed, attention_mask=mask),
         "pass either grafts .* or row_grafts"),
    ]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            bad()
        check("an error path")
    # the grafter is still usable, and still right, after the errors
    got = grafter.logits(torch.tensor([rows[0]]))[0]
    assert max_diff(got, recipient(torch.tensor([rows[0]])).logits[0]) < ATOL
    assert not recipient.training and not donor.training


# ----------------------------------------------------------------------------------------------
# Tied embeddings: embed and lm_head are separate components
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", TIED_ARCHS)
def test_tied_embed_and_lm_head_graft_separately(arch):
    recipient, donor = pair(arch)
    assert recipient.get_output_embeddings().weight is recipient.get_input_embeddings().weight
    grafter = grafter_for(arch)
    row = random_prompt(random.Random(8), 6)
    ids = torch.tensor([row])
    results = {}
    for component in ["embed", "lm_head"]:
        for positions in ["all", [1, -1]]:
            spec = GraftSpec(positions, "all", component)
            got = grafter.logits(ids, grafts=to_grafts(spec))[0]
            want = reference_logits(recipient, donor, ids[0], spec)
            assert max_diff(got, want) < ATOL, f"{arch} {spec}: {max_diff(got, want):.3g}"
            results[component, str(positions)] = got
    both = grafter.logits(ids, grafts=to_grafts(GraftSpec("all", "all", ["embed", "lm_head"])))[0]
    assert max_diff(both, results["embed", "all"]) > 1e-2, "grafting lm_head changed nothing beyond embed"
    assert max_diff(both, results["lm_head", "all"]) > 1e-2, "grafting embed changed nothing beyond lm_head"

    # Hand-computed (gemma2/3 soft-cap their logits, so do the others only)
    if arch in ("gpt2", "gemma", "llama_tied"):
        with torch.no_grad():
            embed_only = recipient(inputs_embeds=donor.get_input_embeddings()(ids)).logits[0]
            hidden = recipient.base_model(ids).last_hidden_state[0]
            head_only = hidden @ donor.get_output_embeddings().weight.T
        assert max_diff(results["embed", "all"], embed_only) < ATOL
        assert max_diff(results["lm_head", "all"], head_only) < ATOL
        assert max_diff(embed_only, donor(ids).logits[0]) > 1e-2


# ----------------------------------------------------------------------------------------------
# Errors
# ----------------------------------------------------------------------------------------------


def _raises(fn, kind: type[Exception], match: str = "") -> str:
    """The message of the error `fn` raises, which must be of type `kind` and match `match`."""
    with pytest.raises(kind, match=match) as info:
        fn()
    return str(info.value)


def test_unknown_component_lists_the_valid_ones():
    grafter = grafter_for("gpt2")
    ids = torch.tensor([random_prompt(random.Random(0), 4)])
    for name in ["quux", "gate", "q_norm", "post_mlp_norm"]:
        message = _raises(
            lambda name=name: grafter.logits(ids, grafts=to_grafts(GraftSpec("all", "all", name))),
            ValueError,
            "component",
        )
        assert name in message, f"error for {name!r} does not name it: {message}"
        for valid in ["pos_embed", "ln_final", "up", "down", "ln1"]:
            assert valid in message, f"error for {name!r} does not list {valid!r}: {message}"
    llama = grafter_for("llama")
    message = _raises(
        lambda: llama.logits(ids, grafts=to_grafts(GraftSpec("all", "all", ["q", "q_norm"]))),
        ValueError,
        r"this llama model has no component\(s\) \['q_norm'\]",
    )
    assert "q_norm" in message and "gate" in message


def test_mismatched_models_are_refused_with_what_differs():
    from weightgraft import Grafter

    gpt2, _ = pair("gpt2")
    llama, _ = pair("llama")
    _raises(
        lambda: Grafter(gpt2, llama),
        ValueError,
        "models differ in architecture: recipient is 'gpt2', donor 'donor' is 'llama'",
    )

    wider = make_model("llama", 5)  # same architecture, different shapes
    import transformers as hf

    config = hf.LlamaConfig(**{**llama.config.to_dict(), "intermediate_size": 64})
    config._attn_implementation = "eager"
    other = hf.AutoModelForCausalLM.from_config(config).eval()
    _raises(lambda: Grafter(wider, other), ValueError, "intermediate_size: recipient 48, donor 64")
    same_config = hf.AutoModelForCausalLM.from_config(wider.config).eval()
    with torch.no_grad():  # the config agrees, but a parameter does not
        same_config.model.layers[0].mlp.up_proj.weight = torch.nn.Parameter(torch.zeros(64, 32))
    _raises(
        lambda: Grafter(wider, same_config),
        ValueError,
        r"differ in parameters: model.layers.0.mlp.up_proj.weight: recipient \(48, 32\) vs donor \(64, 32\)",
    )

    deeper_config = hf.LlamaConfig(**{**llama.config.to_dict(), "num_hidden_layers": 2})
    shallower = hf.AutoModelForCausalLM.from_config(deeper_config).eval()
    _raises(lambda: Grafter(llama, shallower), ValueError, "num_hidden_layers: recipient 4, donor 2")


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_positions_outside_a_row_are_errors(arch):
    grafter = grafter_for(arch)
    rows = [random_prompt(random.Random(0), 6), random_prompt(random.Random(1), 3)]
    ids, mask = pad_batch(rows, "left")
    alone = torch.tensor([rows[1]])
    for positions, message in [
        (3, "position 3 is outside a row of 3 real tokens"),
        (-4, "position -4 is outside a row of 3 real tokens"),
        ([0, 5], "position 5 is outside a row of 3 real tokens"),
        (torch.tensor([True, False]), "mask has length 2, but the row has (3|6) real tokens"),
        ([True] * 4, "mask has length 4, but the row has (3|6) real tokens"),
    ]:
        spec = GraftSpec(positions, "all", "all")
        _raises(lambda spec=spec: grafter.logits(alone, grafts=to_grafts(spec)), ValueError, message)
        # inside the padded tensor but outside the short row's real tokens
        _raises(
            lambda spec=spec: grafter.logits(ids, row_grafts=[None, to_grafts(spec)], attention_mask=mask),
            ValueError,
            message,
        )
        _raises(
            lambda spec=spec: grafter.last_logits(ids, grafts=to_grafts(spec), attention_mask=mask), ValueError, message
        )


def test_other_bad_input_is_refused():
    grafter = grafter_for("llama")
    rows = [random_prompt(random.Random(0), 5), random_prompt(random.Random(1), 3)]
    ids, mask = pad_batch(rows, "left")
    g = to_grafts(GraftSpec("last", "all", "o"))
    both = "pass either grafts .* or row_grafts .*, not both"
    _raises(lambda: grafter.logits(ids, grafts=g, row_grafts=[g, g], attention_mask=mask), ValueError, both)
    _raises(
        lambda: grafter.generate(ids, grafts=g, row_grafts=[g, None], attention_mask=mask, max_new_tokens=2),
        ValueError,
        both,
    )
    _raises(
        lambda: grafter.logits(ids, row_grafts=[g], attention_mask=mask),
        ValueError,
        "row_grafts has 1 entries for a batch of 2 rows",
    )
    _raises(
        lambda: grafter.logits(ids, grafts=to_grafts(GraftSpec("all", 4, "o")), attention_mask=mask),
        ValueError,
        r"layer 4 is outside a model of 4 layers \(use -4..3\)",
    )
    _raises(
        lambda: grafter.logits(ids, grafts=to_grafts(GraftSpec("all", "ninth_1", "o")), attention_mask=mask),
        ValueError,
        "unknown layer band 'ninth_1'",
    )
    right_ids, right_mask = pad_batch(rows, "right")
    _raises(
        lambda: grafter.generate(right_ids, attention_mask=right_mask, max_new_tokens=2),
        ValueError,
        "generate needs left-padded prompts",
    )
    _raises(
        lambda: grafter.generate(ids, attention_mask=mask, max_new_tokens=2, generated="everything"),
        ValueError,
        "generated must be 'none' or 'last', not 'everything'",
    )
