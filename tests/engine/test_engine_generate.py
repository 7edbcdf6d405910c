"""Greedy generation equals token-by-token reference generation, for both documented choices of
what generated tokens get: "none" (the recipient alone) and "last" (the last prompt token's grafts)."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import grafter_for, pad_batch, pair, random_prompt, random_specs, stable_seed, to_grafts
from reference_grafter import GraftSpec, reference_generate
from tiny_model_fixtures import ARCHS

NEW = 4


def _check(arch, out, ids, rows, specs, generated):
    recipient, donor = pair(arch)
    width = ids.shape[1]
    assert out.shape == (len(rows), width + NEW), f"{arch}: output shape {tuple(out.shape)}"
    assert torch.equal(out[:, :width], ids), f"{arch}: the prompt part of the output changed"
    for b, (row, spec) in enumerate(zip(rows, specs)):
        want = reference_generate(recipient, donor, row, spec, NEW, generated)
        got = out[b, width:].tolist()
        assert got == want, f"{arch} generated={generated!r} row {b} ({spec}): {got} != reference {want}"


@pytest.mark.parametrize("generated", ["none", "last"])
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_generation_with_row_grafts_matches_reference(arch, generated):
    recipient, _ = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("gen", arch, generated))
    lengths = [6, 4]
    rows = [random_prompt(rng, n) for n in lengths]
    # the last prompt token is grafted in row 0 so that "last" differs from "none"
    specs = [
        [GraftSpec("last", "all", "all"), GraftSpec(1, "first_half", "attn")],
        random_specs(rng, recipient.config, lengths[1]),
    ]
    ids, mask = pad_batch(rows, "left")
    out = grafter.generate(
        ids,
        row_grafts=[to_grafts(s) for s in specs],
        attention_mask=mask,
        max_new_tokens=NEW,
        do_sample=False,
        generated=generated,
    )
    _check(arch, out, ids, rows, specs, generated)


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gpt_neox", "gemma2"])
def test_greedy_generation_shared_grafts_and_default_mode(arch):
    """`grafts=` for every row, no mask given, and generated left at its default ("none")."""
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("gen-shared", arch))
    rows = [random_prompt(rng, 5) for _ in range(2)]
    spec = GraftSpec([-1, -2], "last_half", ["mlp", "o"] if arch != "gpt2" else ["up", "o"])
    ids = torch.tensor(rows)
    out = grafter.generate(ids, grafts=to_grafts(spec), max_new_tokens=NEW)
    _check(arch, out, ids, rows, [spec, spec], "none")


@pytest.mark.parametrize("arch", ["gpt2", "phi3"])
def test_generation_last_mode_differs_from_none(arch):
    """Guards the two modes against being the same code path."""
    grafter = grafter_for(arch)
    rows = [random_prompt(random.Random(stable_seed("modes", arch, k)), 5) for k in range(4)]
    ids = torch.tensor(rows)
    graft = to_grafts(GraftSpec("last", "all", "all"))
    none = grafter.generate(ids, grafts=graft, max_new_tokens=6, generated="none")
    last = grafter.generate(ids, grafts=graft, max_new_tokens=6, generated="last")
    assert torch.equal(none[:, :6], last[:, :6])  # prompt + first new token agree
    assert not torch.equal(none, last)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_sampling_with_top_k_1_is_greedy_and_seeded_sampling_repeats(arch):
    grafter = grafter_for(arch)
    rows = [random_prompt(random.Random(stable_seed("sample", arch)), 5) for _ in range(2)]
    ids, mask = pad_batch([rows[0], rows[1][:3]], "left")
    graft = to_grafts(GraftSpec("last", "all", "mlp" if arch != "gpt2" else "up"))
    greedy = grafter.generate(ids, grafts=graft, attention_mask=mask, max_new_tokens=NEW)
    top1 = grafter.generate(
        ids,
        grafts=graft,
        attention_mask=mask,
        max_new_tokens=NEW,
        do_sample=True,
        top_k=1,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(greedy, top1)
    runs = [
        grafter.generate(
            ids,
            grafts=graft,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=True,
            temperature=1.5,
            generator=torch.Generator().manual_seed(3),
        )
        for _ in range(2)
    ]
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gemma2"])
def test_generation_sweep_of_last_token_conditions_on_one_prompt(arch):
    """Rows that share a prompt (and so could share its prefix) but differ at the last token."""
    grafter = grafter_for(arch)
    prompt = random_prompt(random.Random(stable_seed("gen-sweep", arch)), 6)
    mlp = "up" if arch == "gpt2" else "mlp"
    specs = [
        None,
        GraftSpec("last", "all", "all"),
        GraftSpec("last", "all", mlp),
        [GraftSpec(0, "all", "attn"), GraftSpec("last", "last_half", "o")],
    ]
    ids = torch.tensor([prompt] * len(specs))
    for generated in ["none", "last"]:
        out = grafter.generate(ids, row_grafts=[to_grafts(s) for s in specs], max_new_tokens=NEW, generated=generated)
        _check(arch, out, ids, [prompt] * len(specs), specs, generated)
