"""Architecture adapters: where each canonical component lives in a Hugging Face model.

An adapter is data, not code: a table from the canonical component names to module paths, plus a
split rule for fused matrices (GPT-2's c_attn, NeoX's query_key_value, Phi-3's qkv_proj). The
engine grafts a component by replacing the *output* of its module at the grafted rows with the
donor module's output on the same input, which equals computing with the donor's weights there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import PretrainedConfig

# A split rule maps a config to, for each part of a fused module, the indices of its output
# features (the last dimension of the module's output).
SplitRule = Callable[[PretrainedConfig], dict[str, torch.Tensor]]

# Canonical names, fixed across architectures so that experiments read the same everywhere.
MODEL_LEVEL = ("embed", "pos_embed", "ln_final", "lm_head")
PER_LAYER = (
    "q", "k", "v", "o", "q_norm", "k_norm",
    "gate", "up", "down",
    "ln1", "ln2", "post_attn_norm", "post_mlp_norm",
)  # fmt: skip
NORMS = ("ln1", "ln2", "q_norm", "k_norm", "post_attn_norm", "post_mlp_norm", "ln_final")
GROUPS = ("attn", "mlp", "norms", "all")


@dataclass(frozen=True)
class Part:
    """A component that is one slice of a fused module's output (e.g. q of GPT-2's c_attn).

    Args:
        module: the fused module's path in a decoder block (e.g. "attn.c_attn").
        part: the name of the slice, a key of the adapter's split rule for that module ("q").

    Raises:
        Nothing here; `check_adapter` checks the part against the split rule.
    """

    module: str
    part: str


ModuleRef = str | Part


@dataclass(frozen=True)
class Adapter:
    """Where the canonical components of one architecture live.

    Paths in `per_layer` are relative to a decoder block; paths in `model_level` are relative to
    the causal-LM model itself. `attn_module` and `mlp_module` name the blocks' submodules whose
    parameters make up the `attn` and `mlp` groups.

    Args:
        model_types: the `config.model_type` values it serves (the first names it in errors).
        layers: the path of the decoder blocks' `ModuleList` ("model.layers").
        model_level: component -> module path in the model (embed, pos_embed, ln_final, lm_head).
        per_layer: component -> module path in a block, or a `Part` of a fused module.
        attn_module: the blocks' attention submodule (the `attn` group).
        mlp_module: the blocks' MLP submodule (the `mlp` group).
        splits: fused module path -> rule(config) giving each part's output columns.
        seq_dims: block modules whose sequence axis is not dim 1 ({"self_attn.q_norm": 2}).

    Raises:
        ValueError: a component name outside the vocabulary.
    """

    model_types: tuple[str, ...]
    layers: str
    model_level: Mapping[str, str]
    per_layer: Mapping[str, ModuleRef]
    attn_module: str
    mlp_module: str
    splits: Mapping[str, SplitRule] = field(default_factory=dict)
    # Per-layer modules whose sequence axis is not dim 1, e.g. {"self_attn.q_norm": 2} for a
    # norm applied to [batch, heads, seq, head_dim].
    seq_dims: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [c for c in self.model_level if c not in MODEL_LEVEL]
        unknown += [c for c in self.per_layer if c not in PER_LAYER]
        if unknown:
            raise ValueError(
                f"adapter for {self.model_types} uses non-canonical components {unknown}; "
                f"model-level names are {list(MODEL_LEVEL)}, per-layer names are {list(PER_LAYER)}"
            )
        for comp, ref in self.per_layer.items():
            if isinstance(ref, Part) and ref.module not in self.splits:
                raise ValueError(f"component {comp!r} is part of {ref.module!r}, which has no split rule")

    @property
    def components(self) -> tuple[str, ...]:
        """Canonical components this architecture has, in a stable order."""
        order = MODEL_LEVEL[:2] + PER_LAYER + MODEL_LEVEL[2:]
        have = set(self.model_level) | set(self.per_layer)
        return tuple(c for c in order if c in have)

    def group(self, name: str) -> tuple[str, ...]:
        """Expand a group name into this architecture's components."""
        if name == "all":
            return self.components
        if name == "norms":
            return tuple(c for c in self.components if c in NORMS)
        prefix = {"attn": self.attn_module, "mlp": self.mlp_module}[name] + "."
        return tuple(
            c for c, ref in self.per_layer.items()
            if (ref.module if isinstance(ref, Part) else ref).startswith(prefix)
        )  # fmt: skip

    def decoder_layers(self, model: nn.Module) -> nn.ModuleList:
        return model.get_submodule(self.layers)


_REGISTRY: dict[str, Adapter] = {}


def register_adapter(adapter: Adapter, *, replace: bool = False) -> Adapter:
    """Make an architecture graftable; keyed by `config.model_type`.

    Args:
        adapter: the architecture's `Adapter`.
        replace: replace an adapter already registered for one of its model types.

    Returns:
        The adapter, registered.

    Raises:
        ValueError: one of its model types has an adapter already and `replace` is False.
    """
    for model_type in adapter.model_types:
        if model_type in _REGISTRY and not replace:
            raise ValueError(f"an adapter for {model_type!r} is already registered; pass replace=True")
        _REGISTRY[model_type] = adapter
    return adapter


def supported_model_types() -> list[str]:
    """The model types that have an adapter.

    Returns:
        The registered `config.model_type` values, sorted.

    Raises:
        Nothing.
    """
    return sorted(_REGISTRY)


def adapter_for(model: nn.Module | PretrainedConfig | str) -> Adapter:
    """The adapter for a model, a config or a model_type string.

    Args:
        model: a causal LM, its config, or a `model_type` string.

    Returns:
        The registered `Adapter` for its model type.

    Raises:
        ValueError: no adapter is registered for it (the message lists the supported types).
    """
    if isinstance(model, str):
        model_type = model
    else:
        config = model if isinstance(model, PretrainedConfig) else getattr(model, "config", None)
        model_type = getattr(config, "model_type", None)
    if model_type not in _REGISTRY:
        raise ValueError(
            f"no weightgraft adapter for model_type {model_type!r}; supported: "
            f"{supported_model_types()}. Describe the architecture with weightgraft.adapters.Adapter "
            "and call weightgraft.register_adapter (see README, 'Adding an architecture')."
        )
    return _REGISTRY[model_type]


def contiguous_split(sizes: Mapping[str, int]) -> dict[str, torch.Tensor]:
    """Parts laid out one after another along the output: [a | b | c]."""
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = torch.arange(start, start + size)
        start += size
    return out


def per_head_interleaved_split(parts: tuple[str, ...], num_heads: int, head_size: int) -> dict[str, torch.Tensor]:
    """Parts interleaved per head: [a_0 b_0 c_0 | a_1 b_1 c_1 | ...], each head_size wide."""
    stride = len(parts) * head_size
    head_starts = torch.arange(num_heads) * stride
    return {
        name: (head_starts[:, None] + i * head_size + torch.arange(head_size)[None, :]).reshape(-1)
        for i, name in enumerate(parts)
    }
