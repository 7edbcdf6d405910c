"""The per-token reference grafter's activations (for `Grafter.run`, `Grafter.cache`).

Token by token, as `reference_grafter.reference_logits` runs a row (a fresh untied copy of the
recipient with exactly that token's donor parameters copied in, one step against the KV cache),
with forward hooks on the copy's modules, found through the reference's own component table
(`component_table`), and transformers' own `output_hidden_states` / `output_attentions`. Each
activation is kept per position, flattened (a module's [1, 1, ...] or [1, heads, 1, dim] output of
one token), so that the engine's [batch, seq, ...] can be compared position by position.
This module must not import weightgraft.engine.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from reference_grafter import MODEL_LEVEL, PER_LAYER, component_table, graft_into, resolve_row_donors, untied_copy


def reference_modules(config, num_layers: int) -> dict[str, tuple[str, str, torch.Tensor | None]]:
    """The engine's activation names (docs/api.md) -> (module path, "pre"/"post"/"z", the output
    columns of a fused part), from the reference's own table."""
    layer, model, prefix = component_table(config)
    out = {}
    for comp in ("embed", "pos_embed"):
        if comp in model:
            out[comp] = (model[comp][0][0], "post", None)
    for i in range(num_layers):
        block = prefix.format(i=i)
        out[f"blocks.{i}.resid_pre"] = (block.rstrip("."), "pre", None)
        for comp in PER_LAYER:
            if comp in layer:
                path, rows = layer[comp][0]
                out[f"blocks.{i}.{comp}"] = (block + path, "post", rows)
                if comp == "o":
                    out[f"blocks.{i}.z"] = (block + path, "z", None)
        out[f"blocks.{i}.resid_post"] = (block.rstrip("."), "post", None)
    for comp in MODEL_LEVEL[2:]:
        if comp in model:
            out[comp] = (model[comp][0][0], "post", None)
    return out


def _hook(store: dict, name: str, kind: str, rows):
    def post(_module, _args, output):
        value = output[0] if isinstance(output, tuple) else output
        store[name] = (value if rows is None else value.index_select(-1, rows)).detach().reshape(-1).clone()

    def pre(_module, args):
        store[name] = args[0].detach().reshape(-1).clone()

    return post if kind == "post" else pre


@torch.no_grad()
def reference_activations(recipient, donors, ids, specs, num_layers: int) -> dict:
    """For one unpadded row `ids` under `specs`: {"acts": {name: [n, features]}, "hidden_states":
    [layers + 1, n, hidden], "attentions": [layers, heads, n, n] (zero above the diagonal; None
    under attention that returns no patterns),
    "logits": [n, vocab]}."""
    ids = [int(x) for x in ids]
    plan = resolve_row_donors(specs, len(ids), recipient.config)
    modules = reference_modules(recipient.config, num_layers)
    cache = DynamicCache(config=recipient.config)
    acts: dict[str, list] = {name: [] for name in modules}
    hidden, attentions, logits = [], [], []
    n = len(ids)
    for t, token in enumerate(ids):
        model = untied_copy(recipient)
        graft_into(model, donors, plan[t])
        store: dict[str, torch.Tensor] = {}
        handles = []
        for name, (path, kind, rows) in modules.items():
            module = model.get_submodule(path)
            if kind == "post":
                handles.append(module.register_forward_hook(_hook(store, name, kind, rows)))
            else:
                handles.append(module.register_forward_pre_hook(_hook(store, name, kind, rows)))
        out = model(
            input_ids=torch.tensor([[token]]),
            position_ids=torch.tensor([[t]]),
            attention_mask=torch.ones(1, t + 1, dtype=torch.long),
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=True,
            output_attentions=True,
        )
        for handle in handles:
            handle.remove()
        cache = out.past_key_values
        for name in modules:
            acts[name].append(store[name])
        hidden.append(torch.stack([h[0, -1] for h in out.hidden_states]))
        if out.attentions:  # eager attention only (sdpa returns none)
            step = torch.zeros(len(out.attentions), out.attentions[0].shape[1], n)
            for layer, att in enumerate(out.attentions):
                seen = att.shape[-1]  # a sliding-window layer's cache holds its last `window` tokens only
                step[layer, :, t + 1 - seen : t + 1] = att[0, :, -1, :]
            attentions.append(step)
        logits.append(out.logits[0, -1])
    return {
        "acts": {name: torch.stack(values) for name, values in acts.items()},
        "hidden_states": torch.stack(hidden, dim=1),
        "attentions": torch.stack(attentions, dim=2) if attentions else None,
        "logits": torch.stack(logits),
    }
