"""Padding, per-row grafts, last_logits and prefix sharing: a batch equals its rows run alone."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import (
    ATOL,
    PAD,
    grafter_for,
    max_diff,
    pad_batch,
    pair,
    random_prompt,
    random_specs,
    real_slice,
    stable_seed,
    to_grafts,
)
from reference_grafter import GraftSpec, reference_logits
from tiny_model_fixtures import ARCHS


def _rows_and_specs(arch, seed):
    recipient, _ = pair(arch)
    rng = random.Random(stable_seed("batch", arch, seed))
    lengths = [7, 3, 5, 6]
    rows = [random_prompt(rng, n) for n in lengths]
    specs = [random_specs(rng, recipient.config, n) for n in lengths]
    specs[1] = GraftSpec(-1, "all", "all")  # at least one row grafted everywhere at its end
    return rows, specs


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("arch", ARCHS)
def test_padded_batch_with_row_grafts_equals_rows_alone(arch, side):
    grafter = grafter_for(arch)
    rows, specs = _rows_and_specs(arch, 0)
    ids, mask = pad_batch(rows, side)
    batch = grafter.logits(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
    last = grafter.last_logits(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
    assert batch.shape == (len(rows), ids.shape[1], pair(arch)[0].config.vocab_size)
    assert last.shape == (len(rows), batch.shape[-1])
    for b, (row, spec) in enumerate(zip(rows, specs)):
        alone = grafter.logits(torch.tensor([row]), grafts=to_grafts(spec))[0]
        diff = max_diff(batch[b, real_slice(mask[b])], alone)
        assert diff < ATOL, f"{arch} {side}-padded row {b} ({spec}): max abs diff {diff:.3g}"
        diff = max_diff(last[b], alone[-1])
        assert diff < ATOL, f"{arch} {side}-padded last_logits row {b} ({spec}): {diff:.3g}"


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "gemma3_text", "phi3"])
def test_padded_rows_equal_reference(arch):
    """The padded batch against the per-token reference directly (not only the engine alone)."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rows, specs = _rows_and_specs(arch, 1)
    for side in ["left", "right"]:
        ids, mask = pad_batch(rows, side)
        batch = grafter.logits(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
        for b, (row, spec) in enumerate(zip(rows, specs)):
            want = reference_logits(recipient, donor, torch.tensor(row), spec)
            diff = max_diff(batch[b, real_slice(mask[b])], want)
            assert diff < ATOL, f"{arch} {side} row {b} ({spec}): max abs diff {diff:.3g}"


@pytest.mark.parametrize("arch", ["gpt2", "llama", "gemma2", "phi3", "gpt_neox"])
def test_prefix_sharing_sweep_of_last_token_conditions(arch):
    """Many rows with one prompt and conditions that differ only at the last token (the paper's
    sweep) give the same logits as each condition run alone, and as the reference."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    prompt = random_prompt(random.Random(stable_seed("prefix", arch)), 8)
    shared = GraftSpec(slice(0, 3), "all", "mlp" if arch != "gpt2" else "up")
    components = ["all", "attn", "mlp", "o", "k", "ln_final", "lm_head", "embed", "norms"]
    conditions = [None] + [[shared, GraftSpec("last", "all", c)] for c in components] + [[shared]]
    ids = torch.tensor([prompt] * len(conditions))
    rg = [to_grafts(c) for c in conditions]
    full = grafter.logits(ids, row_grafts=rg)
    last = grafter.last_logits(ids, row_grafts=rg)
    for b, condition in enumerate(conditions):
        alone = grafter.logits(torch.tensor([prompt]), grafts=to_grafts(condition))[0]
        assert max_diff(full[b], alone) < ATOL, f"{arch} condition {condition}"
        assert max_diff(last[b], alone[-1]) < ATOL, f"{arch} condition {condition} (last_logits)"
    for b in [0, 1, 4, 6, len(conditions) - 1]:
        want = reference_logits(recipient, donor, torch.tensor(prompt), conditions[b])
        assert max_diff(full[b], want) < ATOL, f"{arch} condition {conditions[b]} vs reference"
    # the conditions really differ from each other at the last token
    assert max_diff(last[1], last[2]) > 1e-3


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_prefix_sharing_with_padding_and_mixed_prompts(arch):
    """Two prompts, each under several last-token conditions, interleaved and left-padded."""
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("mixed", arch))
    prompts = [random_prompt(rng, 6), random_prompt(rng, 4)]
    conds = [GraftSpec("last", "all", "o"), GraftSpec("last", "last_half", "mlp"), None]
    rows, row_specs = [], []
    for c in conds:
        for p in prompts:
            rows.append(p)
            row_specs.append(c)
    ids, mask = pad_batch(rows, "left")
    out = grafter.last_logits(ids, row_grafts=[to_grafts(s) for s in row_specs], attention_mask=mask)
    for b, (row, spec) in enumerate(zip(rows, row_specs)):
        alone = grafter.logits(torch.tensor([row]), grafts=to_grafts(spec))[0, -1]
        assert max_diff(out[b], alone) < ATOL, f"{arch} row {b} {spec}"


def test_gpt2_learned_positions_follow_real_tokens_under_left_padding():
    """GPT-2's pos_embed graft at a row's own position k, with the row left-padded, uses the
    donor's position-k vector (not the padded column's)."""
    recipient, donor = pair("gpt2")
    grafter = grafter_for("gpt2")
    rows = [random_prompt(random.Random(21), 8), random_prompt(random.Random(22), 3)]
    ids, mask = pad_batch(rows, "left")
    specs = [GraftSpec(2, "all", "pos_embed"), GraftSpec([0, 2], "all", ["pos_embed", "ln_final"])]
    got = grafter.logits(ids, row_grafts=[to_grafts(s) for s in specs], attention_mask=mask)
    for b, (row, spec) in enumerate(zip(rows, specs)):
        want = reference_logits(recipient, donor, torch.tensor(row), spec)
        assert max_diff(got[b, real_slice(mask[b])], want) < ATOL, f"row {b} {spec}"


@pytest.mark.parametrize("arch", ARCHS)
def test_rows_aligned_on_their_last_prompt_token_keep_only_the_scored_logits(arch):
    """The runner's layout: each prompt padded on the left so that its last token falls in one
    column, its target tokens after it padded on the right; a sweep of last-token conditions
    shares the prefix, and `logits_to_keep` returns only the columns from that one on. Every kept
    row equals the per-token reference on the row alone."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    rng = random.Random(stable_seed("aligned", arch))
    prompts = [random_prompt(rng, n) for n in (7, 4, 5)]
    targets = [random_prompt(rng, n) for n in (2, 1, 3)]
    conditions = [None, ("all", "o"), ("last_half", ["mlp", "lm_head"])]  # (layers, components) at LT
    prompt_end = max(len(p) for p in prompts) - 1  # the column every prompt's last token falls in
    width = prompt_end + max(len(t) for t in targets)
    ids = torch.full((len(prompts) * len(conditions), width), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    rows, specs = [], []
    for p, (prompt, target) in enumerate(zip(prompts, targets)):
        row = prompt + target[:-1]
        start = prompt_end - (len(prompt) - 1)
        for c, spec in enumerate(conditions):
            b = p * len(conditions) + c
            ids[b, start : start + len(row)] = torch.tensor(row)
            mask[b, start : start + len(row)] = 1
            rows.append((row, len(prompt), len(target)))
            specs.append(spec)
    # at the prompt's last token (not the row's: the target's tokens follow it)
    at_lt = [GraftSpec(n - 1, *spec) if spec else None for spec, (_, n, _) in zip(specs, rows)]
    grafts = [to_grafts(g) for g in at_lt]
    keep = width - prompt_end
    kept = grafter.logits(ids, row_grafts=grafts, attention_mask=mask, logits_to_keep=keep)
    assert kept.shape == (len(rows), keep, recipient.config.get_text_config().vocab_size)
    unshared = _without_sharing(grafter).logits(ids, row_grafts=grafts, attention_mask=mask, logits_to_keep=keep)
    for b, ((row, n, t), graft) in enumerate(zip(rows, at_lt)):
        want = reference_logits(recipient, donor, torch.tensor(row), graft)[n - 1 : n - 1 + t]
        assert max_diff(kept[b, :t], want) < ATOL, f"{arch} row {b} ({graft})"
        assert max_diff(unshared[b, :t], want) < ATOL, f"{arch} row {b} ({graft}), sharing off"


def _without_sharing(grafter):
    from weightgraft import Grafter

    return Grafter(grafter.recipient, grafter.donors["donor"].model, share_prefixes=False)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_layer_sweep_shares_the_layers_below_each_graft(arch):
    """One prompt, a graft at one position in layer 0, 1, ... (and none): below its layer a row is
    the ungrafted row's computation, so layer l runs on l + 2 rows (one per distinct history) until
    every row is on its own. Every row equals the per-token reference, run alone."""
    recipient, donor = pair(arch)
    grafter = grafter_for(arch)
    layers = grafter.num_layers
    prompt = random_prompt(random.Random(stable_seed("layers", arch)), 7)
    specs = [None] + [GraftSpec([2, 5], [layer], "all") for layer in range(layers)]
    ids = torch.tensor([prompt] * len(specs))
    seen = []
    blocks = grafter.adapter.decoder_layers(grafter.recipient)
    handles = [
        block.get_submodule(grafter.adapter.mlp_module).register_forward_hook(
            lambda m, args, out, layer=layer: seen.append((layer, args[0].shape[0], args[0].shape[1]))
        )
        for layer, block in enumerate(blocks)
    ]
    try:
        got = grafter.logits(ids, row_grafts=[to_grafts(s) for s in specs])
    finally:
        for handle in handles:
            handle.remove()
    # positions 0-1 are one history (one row, every layer); from position 2 on, layer l sees
    # l + 2 classes (the ungrafted rows, and one per graft at or below l), at most every row
    assert [(layer, rows) for layer, rows, width in seen if width == 2] == [(n, 1) for n in range(layers)]
    assert [(layer, rows) for layer, rows, width in seen if width == 5] == [
        (n, min(n + 2, len(specs))) for n in range(layers)
    ]
    for b, spec in enumerate(specs):
        want = reference_logits(recipient, donor, torch.tensor(prompt), spec)
        assert max_diff(got[b], want) < ATOL, f"{arch} row {b} ({spec})"
