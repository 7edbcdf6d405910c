"""A slow, independent reference of the paper's grafting rules as the authors' code applied them
(written from conditions.md; imports nothing from weightgraft). Llama-family models only.

The authors swapped modules: for each token, left to right, the model computes with the donor's
module wherever that token is grafted, against the key/value cache of the tokens before. Here
each token runs on a fresh deep copy of the recipient into which the donor modules' weights are
loaded. Nothing is untied: on a tied model the token embedding and the unembedding are one
parameter, so loading the donor's embedding also puts in the donor's unembedding for that token,
exactly as it did for the authors. Their "every weight" is the token embedding module and every
decoder layer, never the final norm. The hybrid's last-token band reads a hybrid model built
here by copying tensors: the task model with the relation model's o, up and down in the layers
[n//2, n).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn
from transformers import DynamicCache

Swap = tuple[str, nn.Module]  # (module path in the model, the model whose module is loaded)
# The paper's per-layer weights -> the Llama decoder layer's modules.
LLAMA = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}
DONOR_HEAD = "lm_head (replaced, untied)"  # a diagnostic row's own unembedding, not the authors'


def depth(model: nn.Module) -> int:
    return len(model.model.layers)


def layer_modules(model: nn.Module, layers, parts) -> list[Swap]:
    return [(f"model.layers.{i}.{LLAMA[p]}", model) for i in layers for p in parts]


def every_weight(donor: nn.Module) -> list[Swap]:
    """The authors' "every weight" at a token: the token embedding and each decoder layer whole."""
    return [("model.embed_tokens", donor)] + [(f"model.layers.{i}", donor) for i in range(depth(donor))]


def hybrid_model(task: nn.Module, relation: nn.Module) -> nn.Module:
    """The authors' hybrid: the task model with the relation model's o, up and down in [n//2, n)."""
    model = copy.deepcopy(task)
    n = depth(model)
    for i in range(n // 2, n):
        for part in ("o", "up", "down"):
            path = f"model.layers.{i}.{LLAMA[part]}"
            model.get_submodule(path).load_state_dict(relation.get_submodule(path).state_dict())
    return model


def run_per_token(recipient: nn.Module, ids: list[int], swaps_at: Callable[[int], list[Swap]]) -> torch.Tensor:
    """Logits [len(ids), vocab]: token t computed by the recipient with `swaps_at(t)` loaded."""
    cache = DynamicCache()
    rows = []
    for t, token in enumerate(ids):
        model = copy.deepcopy(recipient)
        for path, source in swaps_at(t):
            if path == DONOR_HEAD:  # a fresh parameter: the embedding keeps its own weight
                model.lm_head.weight = nn.Parameter(source.lm_head.weight.detach().clone())
                continue
            model.get_submodule(path).load_state_dict(source.get_submodule(path).state_dict())
        with torch.no_grad():
            out = model(
                input_ids=torch.tensor([[token]]),
                position_ids=torch.tensor([[t]]),
                past_key_values=cache,
                use_cache=True,
            )
        cache = out.past_key_values
        rows.append(out.logits[0, -1].float())
    return torch.stack(rows)
