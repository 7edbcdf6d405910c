"""What block inference hands on (`BlockRoles`), its refusal, and the module kinds it reads."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from weightgraft.adapters.layouts import Layout


class Refusal(ValueError):
    """A block inference cannot describe; the message is one line saying why."""


@dataclass
class BlockRoles:
    """What inference found in one block (paths relative to the block)."""

    attn: str
    mlp: str
    # component -> path, (path, part), or a list of those (a chain, in data-flow order)
    per_layer: dict[str, object] = field(default_factory=dict)
    splits: dict[str, Layout] = field(default_factory=dict)  # fused path -> part -> columns
    seq_dims: dict[str, int] = field(default_factory=dict)
    call_forms: dict[str, str] = field(default_factory=dict)  # path -> "flat" (tokens laid flat)
    history: list[str] = field(default_factory=list)  # modules that run over the cached positions


def direct_parameters(module: nn.Module) -> list[str]:
    return [name for name, _ in module.named_parameters(recurse=False)]


def is_norm_like(module: nn.Module) -> bool:
    params = list(module.parameters(recurse=False))
    return bool(params) and all(p.dim() == 1 for p in params) and not list(module.children())


def is_linear_like(module: nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 2 and not isinstance(module, nn.Embedding)
