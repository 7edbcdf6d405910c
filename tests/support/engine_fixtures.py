"""Shared helpers for the engine tests: cached model pairs, padding, random grafts, snapshots."""

from __future__ import annotations

import functools
import random
import zlib

import torch

from reference_grafter import GROUPS, GraftSpec, component_table, reference_logits
from tiny_model_fixtures import make_pair

# fp32 rounding, same math by another route: the engine runs whole (batched, padded) sequences
# with the grafted rows spliced in, the reference one token at a time against a KV cache (or a
# plain forward of another shape). Measured on CPU: at most 3.8e-6 on logits over the engine
# tests, so 1e-4 leaves a 25x margin and is still far below what any graft changes (asserts that
# a graft "changes something" ask for > 1e-3 or > 1e-2; measured: at least 0.23).
ATOL = 1e-4
PAD = 0


@functools.cache
def pair(arch: str, seed: int = 0):
    return make_pair(arch, seed)


def grafter_for(arch: str, seed: int = 0):
    from weightgraft import Grafter

    recipient, donor = pair(arch, seed)
    return Grafter(recipient, donor)


def stable_seed(*parts) -> int:
    """A seed that does not change between runs (Python's str hash does)."""
    return zlib.crc32(repr(parts).encode())


def random_prompt(rng: random.Random, length: int, vocab: int = 151) -> list[int]:
    return [rng.randrange(1, vocab) for _ in range(length)]


def pad_batch(rows: list[list[int]], side: str = "left"):
    """(input_ids [B, T], attention_mask [B, T]) with PAD on the given side."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        if side == "left":
            ids[b, width - len(row) :] = torch.tensor(row)
            mask[b, width - len(row) :] = 1
        else:
            ids[b, : len(row)] = torch.tensor(row)
            mask[b, : len(row)] = 1
    return ids, mask


def real_slice(mask_row: torch.Tensor) -> torch.Tensor:
    return mask_row.nonzero().flatten()


def to_graft(spec: GraftSpec):
    from weightgraft import Graft

    return Graft(spec.positions, spec.layers, spec.components, donor=spec.donor)


def to_grafts(specs):
    """GraftSpec / list of GraftSpec / None -> what the engine takes."""
    if specs is None:
        return None
    if isinstance(specs, GraftSpec):
        return to_graft(specs)
    return [to_graft(s) for s in specs]


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().max().item()


# ----------------------------------------------------------------------------------------------
# Random grafts
# ----------------------------------------------------------------------------------------------

BAND_NAMES = ["first_half", "last_half", "first_quarter", "second_quarter", "third_quarter", "last_quarter"] + [
    f"eighth_{k}" for k in range(1, 9)
]


def _band(name: str, n_layers: int) -> list[int]:
    from reference_grafter import _bands

    return _bands(n_layers)[name]


def random_layers(rng: random.Random, n_layers: int):
    """A layer spec that is "all" or resolves to a non-empty strict subset of the layers."""
    kind = rng.choice(["all", "int", "neg", "list", "range", "band", "band"])
    if kind == "all":
        return "all"
    if kind == "int":
        return rng.randrange(n_layers)
    if kind == "neg":
        return -rng.randrange(1, n_layers + 1)
    if kind == "list":
        k = rng.randrange(1, n_layers)
        return sorted(rng.sample(range(n_layers), k))
    if kind == "range":
        start = rng.randrange(n_layers)
        stop = rng.randrange(start + 1, n_layers + 1)
        if stop - start == n_layers:
            stop -= 1
            if stop == start:
                return start
        return range(start, stop)
    bands = [b for b in BAND_NAMES if 0 < len(_band(b, n_layers)) < n_layers]
    return rng.choice(bands)


def random_positions(rng: random.Random, n: int, allow_mask: bool = True):
    """A position spec valid for every row with at least n real tokens (masks: exactly n)."""
    kinds = ["all", "last", "int", "neg", "list", "slice", "slice_neg", "slice_step"]
    if allow_mask:
        kinds += ["mask", "mask_tensor"]
    kind = rng.choice(kinds)
    if kind in ("all", "last"):
        return kind
    if kind == "int":
        return rng.randrange(n)
    if kind == "neg":
        return -rng.randrange(1, n + 1)
    if kind == "list":
        return [rng.choice([p, p - n]) for p in rng.sample(range(n), rng.randrange(1, min(n, 4) + 1))]
    if kind == "slice":
        a = rng.randrange(n)
        return slice(a, rng.randrange(a + 1, n + 1))
    if kind == "slice_neg":
        return slice(-rng.randrange(1, n + 1), None)
    if kind == "slice_step":
        return slice(rng.randrange(2), None, 2)
    mask = [rng.random() < 0.4 for _ in range(n)]
    mask[rng.randrange(n)] = True
    return torch.tensor(mask) if kind == "mask_tensor" else mask


def random_components(rng: random.Random, config):
    layer_table, model_table, _ = component_table(config)
    per_layer = list(layer_table)
    fused_parts = {"gpt2": ["q", "k", "v"], "gpt_neox": ["q", "k", "v"], "phi3": ["q", "k", "v", "gate", "up"]}.get(
        config.model_type, []
    )
    kind = rng.choice(["one", "one", "fused", "list", "group", "model", "mixed"])
    if kind == "one":
        return rng.choice(per_layer)
    if kind == "fused" and fused_parts:
        return rng.choice(fused_parts)
    if kind == "list":
        return rng.sample(per_layer, rng.randrange(1, 4))
    if kind == "group":
        return rng.choice(GROUPS)
    if kind == "model":
        return rng.choice(list(model_table))
    return [rng.choice(per_layer), rng.choice(list(model_table)), rng.choice(["attn", "mlp", "norms"])]


def random_spec(rng: random.Random, config, n: int, allow_mask: bool = True) -> GraftSpec:
    return GraftSpec(
        random_positions(rng, n, allow_mask), random_layers(rng, num_layers_of(config)), random_components(rng, config)
    )


def random_specs(rng: random.Random, config, n: int, allow_mask: bool = True):
    """None, one GraftSpec, or a list of 2 (a union)."""
    r = rng.random()
    if r < 0.1:
        return None
    if r < 0.65:
        return random_spec(rng, config, n, allow_mask)
    return [random_spec(rng, config, n, allow_mask) for _ in range(2)]


def num_layers_of(config) -> int:
    return config.get_text_config().num_hidden_layers


def reference_rows(recipient, donor, rows: list[list[int]], row_specs) -> list[torch.Tensor]:
    return [reference_logits(recipient, donor, torch.tensor(r), s) for r, s in zip(rows, row_specs)]


# ----------------------------------------------------------------------------------------------
# Snapshots: both models must be bit-identical after every call.
# ----------------------------------------------------------------------------------------------


def snapshot(model) -> dict:
    state = {f"param:{k}": v.detach().clone() for k, v in model.named_parameters(remove_duplicate=False)}
    state.update({f"buffer:{k}": v.detach().clone() for k, v in model.named_buffers(remove_duplicate=False)})
    state["tied"] = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    state["training"] = model.training
    return state


def assert_unchanged(model, before: dict, what: str) -> None:
    after = snapshot(model)
    assert after.keys() == before.keys(), f"{what}: parameter/buffer names changed"
    for key, value in before.items():
        if isinstance(value, torch.Tensor):
            same = (
                value.dtype == after[key].dtype and value.shape == after[key].shape and torch.equal(value, after[key])
            )
            assert same, f"{what}: {key} changed"
        else:
            assert value == after[key], f"{what}: {key} changed ({value} -> {after[key]})"
