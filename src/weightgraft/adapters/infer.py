"""An adapter for a decoder no one registered, inferred from the model itself.

The stack of decoder blocks is the one list of `num_hidden_layers` identical blocks, each run
once per forward pass; the roles inside a block are decided by behaviour (`block_roles.py`); the
model-level modules are the input and output embeddings, a norm reading the last block, and a
position embedding. Whatever no role takes is refused in one line naming it, never guessed.
The adapter is cached per model fingerprint (class, config and parameter shapes), since a
layout may differ between checkpoints of one model type.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch
from torch import nn

from weightgraft.adapters.base import Adapter, Part, model_level_paths
from weightgraft.adapters.block_roles import BlockInference
from weightgraft.adapters.coverage import uncovered_parameters
from weightgraft.adapters.fit import AdapterError, check_fit
from weightgraft.adapters.latent_roles import history_modules
from weightgraft.adapters.model_forms import model_call_forms
from weightgraft.adapters.probe import BlockProbe, first_tensor, primary_input
from weightgraft.adapters.role_types import BlockRoles, Refusal, direct_parameters, is_norm_like

_CACHE: dict[str, Adapter] = {}
ADVICE = "describe the model with weightgraft.adapters.Adapter and register it (README, 'Adding an architecture')"


def model_fingerprint(model: nn.Module) -> str:
    """What fixes a model's module table: its class, config and parameter names and shapes."""
    config = getattr(model, "config", None)
    try:
        text = config.to_json_string(use_diff=False) if config is not None else ""
    except (TypeError, ValueError):
        text = repr(config)
    shapes = ";".join(f"{n}:{tuple(p.shape)}" for n, p in model.named_parameters())
    return hashlib.sha256(f"{type(model).__name__}|{text}|{shapes}".encode()).hexdigest()


def infer_adapter(model: nn.Module) -> Adapter:
    """The adapter of `model` decided by behaviour on a probe pass (cached per fingerprint).

    Raises `AdapterError` with one line naming why when the model has something no canonical
    component can take (a recurrent or convolutional block, parameters outside every projection
    and norm, blocks that differ, a fused projection no candidate layout explains).
    """
    key = model_fingerprint(model)
    if key not in _CACHE:
        _CACHE[key] = _infer(model)
    return _CACHE[key]


def _infer(model: nn.Module) -> Adapter:
    model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
    if any(p.is_meta for p in model.parameters()):
        raise AdapterError(f"cannot infer an adapter for {model_type!r} on the meta device; load it with weights")
    was_training = model.training
    model.eval()
    try:
        layers = decoder_stack(model)
        _check_uniform(model, layers)
        probe = BlockProbe(model, model.get_submodule(layers))
        inference = BlockInference(probe, head_shapes(model))
        roles = inference.roles()
        if inference.chained:
            roles.history = history_modules(model, probe.block, inference.chained)
        level = model_level(model, layers)
        adapter = _adapter(model_type, layers, level, roles, model_call_forms(model, model_level_paths(level)))
    except Refusal as refusal:
        raise AdapterError(f"weightgraft cannot graft this {model_type!r} model: {refusal}; {ADVICE}") from None
    except (RuntimeError, ValueError, TypeError, IndexError) as error:  # the model's own code failed on the probe
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise AdapterError(
            f"weightgraft cannot graft this {model_type!r} model: its probe pass failed ({first})"
        ) from None
    finally:
        model.train(was_training)
    uncovered = uncovered_parameters(model, adapter)
    if uncovered:
        raise AdapterError(
            f"weightgraft cannot graft this {model_type!r} model: parameters {uncovered[:6]} belong to no "
            f"canonical component; {ADVICE}"
        )
    try:
        check_fit(model, adapter)
    except AdapterError as error:
        raise AdapterError(f"the adapter inferred for {model_type!r} fails its check: {error}") from None
    return adapter


def decoder_stack(model: nn.Module) -> str:
    """The path of the one ModuleList of `num_hidden_layers` blocks of one class."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    count = getattr(config, "num_hidden_layers", None)
    found = [
        name
        for name, module in model.named_modules()
        if isinstance(module, nn.ModuleList)
        and len(module) == count
        and len({type(block) for block in module}) == 1
        and any(True for _ in module.parameters())
    ]
    planned = getattr(config, "base_model_pp_plan", None) or {}
    if len(found) > 1:
        found = [name for name in found if name.rsplit(".", 1)[-1] in planned] or found
    if len(found) != 1:
        what = "no" if not found else f"{len(found)} ({found})"
        raise Refusal(f"{what} lists of {count} identical decoder blocks (num_hidden_layers) found")
    return found[0]


def _check_uniform(model: nn.Module, layers: str) -> None:
    """Every block has block 0's modules, classes and parameter shapes (one table for all)."""
    blocks = model.get_submodule(layers)

    def table(block: nn.Module) -> list:
        modules = [(n, type(m).__name__) for n, m in block.named_modules()]
        return modules + [(n, tuple(p.shape)) for n, p in block.named_parameters()]

    first = table(blocks[0])
    differ = [i for i, block in enumerate(blocks) if table(block) != first]
    if differ:
        raise Refusal(f"decoder blocks {differ[:6]} differ from block 0 (non-uniform blocks)")


def head_shapes(model: nn.Module) -> list[tuple[int, int, int]]:
    """(query heads, key-value heads, head width) combinations the config allows."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = getattr(config, "num_attention_heads", None)
    if not heads:
        return []
    hidden = getattr(config, "hidden_size", 0)
    widths = {w for w in (getattr(config, "head_dim", None), hidden // heads if hidden else None) if w}
    kv = {heads, 1, getattr(config, "num_key_value_heads", None) or heads}
    return [(heads, k, w) for w in sorted(widths) for k in sorted(kv)]


@torch.no_grad()
def model_level(model: nn.Module, layers: str) -> dict[str, str | tuple[str, ...]]:
    """embed, lm_head, and by data flow ln_final (reads the last block), pos_embed and a norm of
    the embedding's output (which joins embed as a chain)."""
    names = {id(m): n for n, m in model.named_modules()}
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    if embed is None or head is None or id(head) not in names:
        raise Refusal("the model has no input or output embedding module (get_input/output_embeddings)")
    found = {"embed": names[id(embed)], "lm_head": names[id(head)]}
    inside = layers + "."
    others = [n for n, m in model.named_modules() if direct_parameters(m) and not n.startswith(inside)]
    others = [n for n in others if n not in found.values()]
    embed_path = found["embed"]
    seen = _model_pass(model, layers, others + [embed_path])
    last_block = seen.pop("last block")
    for path in others:
        module, x = model.get_submodule(path), seen.get(path, (None, None))[0]
        if (
            isinstance(module, nn.Embedding)
            and "pos_embed" not in found
            and x is not None
            and not x.is_floating_point()
        ):
            found["pos_embed"] = path
        elif is_norm_like(module) and x is not None and torch.equal(x, last_block) and "ln_final" not in found:
            found["ln_final"] = path
        else:
            near_embed = x is not None and torch.equal(x, seen[embed_path][1])
            if near_embed and is_norm_like(module) and found["embed"] == embed_path:
                found["embed"] = (embed_path, path)  # an embedding norm joins embed as a chain (BLOOM)
                continue
            why = "an embedding norm" if near_embed else "outside the decoder blocks"
            params = [f"{path}.{p}" for p in direct_parameters(module)]
            raise Refusal(f"parameters {params} are {why}, which no canonical component takes")
    return found


def _model_pass(model: nn.Module, layers: str, paths: list[str]) -> dict:
    seen: dict = {}
    handles = []

    def keep(path: str):
        def hook(module, args, kwargs, output):
            seen.setdefault(path, (primary_input(args, kwargs), first_tensor(output)))

        return hook

    for path in paths:
        handles.append(model.get_submodule(path).register_forward_hook(keep(path), with_kwargs=True))
    blocks = model.get_submodule(layers)
    handles.append(
        blocks[len(blocks) - 1].register_forward_hook(
            lambda m, a, k, out: seen.__setitem__("last block", first_tensor(out)), with_kwargs=True
        )
    )
    ids = torch.arange(1, 8, device=next(model.parameters()).device)[None]
    try:
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _adapter(model_type: str, layers: str, level: dict, roles: BlockRoles, forms: dict) -> Adapter:
    def ref(found):
        return Part(*found) if isinstance(found, tuple) else found

    per_layer = {c: tuple(map(ref, r)) if isinstance(r, list) else ref(r) for c, r in roles.per_layer.items()}
    splits = {path: _fixed(layout) for path, layout in roles.splits.items()}
    return Adapter(
        model_types=(model_type,),
        layers=layers,
        model_level=level,
        per_layer=per_layer,
        attn_module=roles.attn,
        mlp_module=roles.mlp,
        splits=splits,
        seq_dims=dict(roles.seq_dims),
        call_forms=dict(roles.call_forms),
        model_call_forms=forms,
        history_modules=tuple(roles.history),
        origin="inferred",
    )


def _fixed(layout: dict[str, torch.Tensor]):
    """A split rule that gives the layout found on this model (cached per fingerprint)."""

    def rule(config) -> dict[str, torch.Tensor]:
        return {part: cols.clone() for part, cols in layout.items()}

    return rule


def same_table(adapter: Adapter, other: Adapter, config) -> bool:
    """Two adapters name the same modules, parts, columns and sequence axes for this config."""

    def table(a: Adapter) -> tuple:
        level = dict(a.model_level), dict(a.model_call_forms)
        return a.layers, level, dict(a.per_layer), dict(a.seq_dims), a.attn_module, a.mlp_module

    if table(adapter) != table(other):
        return False
    if set(adapter.splits) != set(other.splits):
        return False
    for path in adapter.splits:
        mine, theirs = adapter.splits[path](config), other.splits[path](config)
        if set(mine) != set(theirs) or any(not torch.equal(mine[p], theirs[p]) for p in mine):
            return False
    return True


def as_alias(registered: Adapter, model_type: str) -> Adapter:
    """A registered adapter used for a model whose table equals it under another model_type."""
    return dataclasses.replace(registered, model_types=(model_type,), origin=f"alias of {registered.model_types[0]}")
