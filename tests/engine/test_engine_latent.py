"""Multi-latent attention (MiniCPM3: a low-rank q chain and a dense MLP; DeepSeek-V3: MoE blocks):
the adapter inferred by behaviour names the modules and columns the modeling files give, and
grafts of q (a chain), k (the rotary key's columns of kv_a_proj_with_mqa with the per-head k
columns of kv_b_proj), v and kv_latent equal the independent per-token reference, on padded
batches whose rows share prefixes; generation refuses what kv_b_proj's history would undo."""

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
from reference_grafter import GraftSpec, component_table, reference_generate

ARCHS = ["minicpm3", "deepseek_v3"]
LATENT_PARTS = ["q", "k", "v", "kv_latent"]


@cache
def _pair(arch: str):
    torch.manual_seed(0)
    recipient = census_models.build_tiny(arch, 0)
    return recipient, census_models.donor_of(recipient, 1)


@cache
def _grafter(arch: str, share_prefixes: bool = True):
    from weightgraft import Grafter

    return Grafter(*_pair(arch), share_prefixes=share_prefixes)


def _pieces(adapter, config, comp):
    from weightgraft.adapters.base import Part, chain_of

    out = []
    for ref in chain_of(adapter.per_layer[comp]):
        if isinstance(ref, Part):
            out.append((ref.module, adapter.splits[ref.module](config)[ref.part].tolist()))
        else:
            out.append((ref, None))
    return out


@pytest.mark.parametrize("arch", ARCHS)
def test_inferred_adapter_is_the_modeling_files(arch):
    from weightgraft.adapters import adapter_for

    recipient, _ = _pair(arch)
    adapter = adapter_for(recipient)
    assert adapter.origin == "inferred"
    layer, _, _ = component_table(recipient.config)
    assert set(adapter.per_layer) == set(layer)
    for comp, pieces in layer.items():
        want = [(path, None if rows is None else rows.tolist()) for path, rows in pieces]
        assert _pieces(adapter, recipient.config, comp) == want, comp
    assert adapter.history_modules == ("self_attn.kv_b_proj",)
    assert adapter.seq_dims == {"self_attn.kv_b_proj": 2}
    assert "kv_latent" in adapter.group("attn")


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("arch", ARCHS)
def test_random_grafts_match_reference(arch, seed):
    """Rows 0 and 1 share a prompt (a shared prefix, then different grafts of the latent
    attention's parts); row 2 gets random grafts of anything."""
    recipient, donor = _pair(arch)
    rng = random.Random(stable_seed("latent", arch, seed))
    shared = random_prompt(rng, rng.randrange(5, 8))
    rows = [shared, list(shared), random_prompt(rng, rng.randrange(4, 9))]
    ids, mask = pad_batch(rows, "left")
    layers = recipient.config.num_hidden_layers
    row_specs = [
        GraftSpec(random_positions(rng, len(rows[0])), rng.randrange(layers), rng.sample(LATENT_PARTS, 2)),
        GraftSpec("last", rng.randrange(layers), rng.choice(LATENT_PARTS)),
        random_specs(rng, recipient.config, len(rows[2])),
    ]
    for share in (True, False):
        got = _grafter(arch, share).logits(ids, row_grafts=[to_grafts(s) for s in row_specs], attention_mask=mask)
        want = reference_rows(recipient, donor, rows, row_specs)
        for b in range(len(rows)):
            diff = max_diff(got[b, real_slice(mask[b])], want[b])
            assert diff < ATOL, f"{arch} row {b} (share_prefixes={share}): {row_specs[b]}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("arch", ARCHS)
def test_each_part_at_one_position_moves_later_positions_as_the_reference(arch):
    """Each part at the first position only; k, v and kv_latent there move the later positions,
    which read that key and value (q there moves nothing: position 0 attends to itself alone)."""
    recipient, donor = _pair(arch)
    row = random_prompt(random.Random(stable_seed("one", arch)), 6)
    ids = torch.tensor([row])
    for comp in LATENT_PARTS:
        spec = GraftSpec([0], 0, comp)
        got = _grafter(arch).logits(ids, grafts=to_grafts(spec))[0]
        want = reference_rows(recipient, donor, [row], [spec])[0]
        plain = recipient(ids).logits[0]
        assert max_diff(got, want) < ATOL, comp
        if comp != "q":
            assert max_diff(got[1:], plain[1:]) > 1e-3, f"{comp} at position 0 changed nothing later"


def test_generate_refuses_the_history_and_grafts_q():
    from weightgraft import Graft
    from weightgraft.errors import UserError

    recipient, donor = _pair("minicpm3")
    row = random_prompt(random.Random(5), 5)
    ids = torch.tensor([row])
    with pytest.raises(UserError, match="logits or last_logits"):
        _grafter("minicpm3").generate(ids, grafts=Graft("all", 0, "v"), max_new_tokens=3)
    got = _grafter("minicpm3").generate(ids, grafts=Graft("last", "all", "q"), max_new_tokens=3)
    want = reference_generate(recipient, donor, row, GraftSpec("last", "all", "q"), 3)
    assert got[0, len(row) :].tolist() == want


def test_heads_of_a_chain_are_refused_by_name():
    from weightgraft import Graft
    from weightgraft.engine.units import UnitError

    ids = torch.tensor([random_prompt(random.Random(3), 4)])
    with pytest.raises(UnitError, match="chain"):
        _grafter("minicpm3").logits(ids, grafts=Graft("last", 0, "q", heads=[1]))
