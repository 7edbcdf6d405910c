"""Activations under a graft: the grafted pass as transformers returns it (`grafted_run`), every
intermediate activation by a stable name (`grafted_cache`), and the logit lens on top
(`logit_lens`, `readout`).

Each runs one grafted pass with the `Grafter`'s own splices, rows in full (prefix and layer
sharing off, so that a hook sees every row's own residual stream); its logits equal
`Grafter.logits` with `share_prefixes=False`. Hooks added here are registered after the
engine's, so they see the grafted outputs.

Names (`grafted_cache`):
- `embed`, `pos_embed`: the embeddings' outputs [batch, seq, hidden];
- `blocks.{i}.resid_pre`, `blocks.{i}.resid_post`: the residual stream entering and leaving
  decoder block i [batch, seq, hidden];
- `blocks.{i}.{component}`: the output of a block's component (`q`, `k`, `v`, `o`, `gate`, `up`,
  `down`, `ln1`, `ln2`, and where the model has them `q_norm`, `k_norm`, `post_attn_norm`,
  `post_mlp_norm`), a fused matrix's part as its own columns [batch, seq, features];
- `blocks.{i}.z`: the attention's output per head before `o` [batch, seq, heads, head_dim]
  (what `Graft(..., components="o", heads=...)` weighs);
- `ln_final`, `lm_head`: the final norm's output and the logits.
A module the block calls on its tokens laid flat (OPT's MLP, a MoE router) is kept as
[batch, seq, ...] all the same; experts fed every token once per expert (Llama 4's) as
[batch, seq, experts, hidden].
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from weightgraft.adapters import adapter_for
from weightgraft.adapters.base import PER_LAYER
from weightgraft.engine.graft_masks import GraftMasks
from weightgraft.engine.grafter_protocol import GraftPasses
from weightgraft.engine.hooks import SpliceHooks
from weightgraft.engine.inputs import call_inputs, last_real_index, position_ids


@dataclass
class GraftedCall:
    """One call's inputs, its graft masks and the engine's hooks, installed on the recipient."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    grafted: GraftMasks
    hooks: SpliceHooks


@contextmanager
def grafted_call(grafter: GraftPasses, inputs, grafts, row_grafts, attention_mask) -> Iterator[GraftedCall]:
    """The grafts' hooks installed on the recipient, every row in full (sharing off), in eval
    mode; `call.hooks.current` still to be set to the splices of the pass."""
    ids, mask, roles = call_inputs(inputs, attention_mask, grafter.device)
    grafted = grafter._graft_masks(grafts, row_grafts, mask, roles)
    positions = position_ids(mask)
    sharing, grafter.share_prefixes = grafter.share_prefixes, False
    try:
        with grafter._running(grafted) as (hooks, _):
            yield GraftedCall(ids, mask, positions, grafted, hooks)
    finally:
        grafter.share_prefixes = sharing


def grafted_run(grafter: GraftPasses, inputs, grafts, row_grafts, attention_mask, **model_kwargs):
    """The recipient's own output object (`CausalLMOutputWithPast`) for the grafted pass."""
    with grafted_call(grafter, inputs, grafts, row_grafts, attention_mask) as call:
        call.hooks.current = grafter._splices(call.grafted, call.hooks.paths, keep=0)
        return grafter.recipient(
            input_ids=call.input_ids,
            attention_mask=call.attention_mask,
            position_ids=call.position_ids,
            **model_kwargs,
        )


def activation_names(grafter: GraftPasses) -> dict[str, tuple[str, str, torch.Tensor | None]]:
    """Every name `grafted_cache` knows, in one fixed order (the embeddings; per block its
    `resid_pre`, its components in the vocabulary's order, `resid_post`; the final norm and the
    logits): name -> (module path,
    kind: "pre" (the module's input), "post" (its output) or "z" (o's input per head), the
    output columns of a fused part or None)."""
    adapter, layers = grafter.adapter, grafter.adapter.layers
    by_key = {grafter.keys[k]: (path, cols) for k, (path, cols) in grafter.index.key_target.items()}
    out: dict[str, tuple[str, str, torch.Tensor | None]] = {}
    for comp in ("embed", "pos_embed"):
        if (None, comp) in by_key:
            out[comp] = (by_key[(None, comp)][0], "post", None)
    for layer in range(grafter.num_layers):
        out[f"blocks.{layer}.resid_pre"] = (f"{layers}.{layer}", "pre", None)
        for comp in [c for c in PER_LAYER if c in adapter.per_layer]:
            path, cols = by_key[(layer, comp)]
            out[f"blocks.{layer}.{comp}"] = (path, "post", cols)
            if comp == "o":
                out[f"blocks.{layer}.z"] = (path, "z", None)
        out[f"blocks.{layer}.resid_post"] = (f"{layers}.{layer}", "post", None)
    for comp in ("ln_final", "lm_head"):
        if (None, comp) in by_key:
            out[comp] = (by_key[(None, comp)][0], "post", None)
    return out


def chosen_names(known: Sequence[str], names: str | Sequence[str] | None) -> list[str]:
    """The known names that `names` (exact names or glob patterns such as "blocks.*.resid_post";
    None: every name) select, in `activation_names`' order; a pattern that selects nothing is an error."""
    if names is None:
        return list(known)
    patterns = [names] if isinstance(names, str) else list(names)
    missing = [p for p in patterns if not fnmatch.filter(known, p)]
    if missing:
        raise ValueError(
            f"no activation is named {missing}; names look like 'blocks.0.resid_post', 'blocks.*.o', "
            f"'embed' (this model has {len(known)}: {list(known)[:6]} ...; docs/api.md lists them)"
        )
    return [n for n in known if any(fnmatch.fnmatchcase(n, p) for p in patterns)]


def grafted_cache(
    grafter: GraftPasses, inputs, grafts, row_grafts, attention_mask, names
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The activations named by `names` (see the module's docstring) and the logits of one
    grafted pass; every tensor keeps the call's [batch, seq] layout (padding included)."""
    with grafted_call(grafter, inputs, grafts, row_grafts, attention_mask) as call:
        return _cache_during(grafter, call, names)


def _cache_during(grafter: GraftPasses, call: GraftedCall, names) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """`grafted_cache`'s pass inside an installed `call` (whose mask a caller may still need)."""
    table = activation_names(grafter)
    wanted = chosen_names(list(table), names)
    kept: dict[str, torch.Tensor] = {}
    heads = getattr(grafter.recipient.config, "num_attention_heads", None)
    call.hooks.current = grafter._splices(call.grafted, call.hooks.paths, keep=0)
    handles = []
    try:
        for name in wanted:
            path, kind, cols = table[name]
            module = grafter.recipient.get_submodule(path)
            layout = (grafter._seq_dims.get(path, 1), grafter._call_forms.get(path, "rows"), call.input_ids.shape)
            keep = _keeper(kept, name, kind, cols, layout, heads)
            if kind == "post":
                handles.append(module.register_forward_hook(keep, with_kwargs=True))
            else:
                handles.append(module.register_forward_pre_hook(keep, with_kwargs=True))
        logits = grafter.recipient(
            input_ids=call.input_ids, attention_mask=call.attention_mask, position_ids=call.position_ids
        ).logits
    finally:
        for handle in handles:
            handle.remove()
    return {name: kept[name] for name in wanted if name in kept}, logits


def _keeper(kept: dict, name: str, kind: str, cols, layout: tuple, heads: int | None):
    """A hook that stores one activation under `name`: the pass's own tensor, detached, not a
    copy (the engine's splices have written it before this hook runs, and the pass does not
    write into a module's output afterwards; copying every activation cost a tenth of a pass).
    `layout` is the module's (sequence axis, call form, the pass's [batch, seq]): a module that
    sees flat tokens is kept as [batch, seq, ...], one fed every token per expert (Llama 4's
    experts) as [batch, seq, experts, ...]."""
    seq_dim, form, (batch, seq) = layout

    def keep(_module, args, kwargs, output=None):
        if kind == "post":
            value = output[0] if isinstance(output, tuple) else output
        else:
            value = args[0] if args else next(iter(kwargs.values()))
        if seq_dim != 1:
            value = value.movedim(seq_dim, 1)
        if form == "flat" and value.shape[0] == batch * seq:
            # A copy: a block may add into such an output in place (Llama 4's shared expert's).
            value = value.reshape(batch, seq, *value.shape[1:]).clone()
        elif form == "per_expert":
            value = value.reshape(-1, batch, seq, *value.shape[1:]).movedim(0, 2)
        if cols is not None:
            value = value.index_select(-1, cols.to(value.device))
        if kind == "z":
            if not heads:
                raise ValueError("this model's config has no num_attention_heads: blocks.*.z cannot be split")
            value = value.reshape(*value.shape[:2], heads, -1)
        kept[name] = value.detach()

    if kind == "post":
        return keep
    return lambda module, args, kwargs: keep(module, args, kwargs)


def readout(model, hidden: torch.Tensor) -> torch.Tensor:
    """Logits of residual-stream vectors through the recipient's final norm and unembedding
    (and its logit soft-cap where the architecture has one): the logit lens's basis."""
    adapter = adapter_for(model)
    norm = model.get_submodule(adapter.model_level["ln_final"])
    head = model.get_submodule(adapter.model_level["lm_head"])
    logits = head(norm(hidden))
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


@torch.no_grad()
def logit_lens(grafter: GraftPasses, inputs, grafts, row_grafts, attention_mask) -> torch.Tensor:
    """Logits [batch, layers, vocab] read from the residual stream after each block at each row's
    last real token, through the recipient's final norm and unembedding."""
    with grafted_call(grafter, inputs, grafts, row_grafts, attention_mask) as call:
        acts, _ = _cache_during(grafter, call, "blocks.*.resid_post")
    mask = call.attention_mask
    last = last_real_index(mask)
    rows = torch.arange(mask.shape[0], device=mask.device)
    stream = torch.stack([acts[f"blocks.{i}.resid_post"][rows, last] for i in range(grafter.num_layers)], dim=1)
    return readout(grafter.recipient, stream)
