"""Architecture adapters: where each canonical component lives in a Hugging Face model.

An adapter is data, not code: a table from the canonical component names to module paths, plus a
split rule for fused matrices (GPT-2's c_attn, NeoX's query_key_value, Phi-3's qkv_proj). The
engine grafts a component by replacing the *output* of its module at the grafted rows with the
donor module's output on the same input, which equals computing with the donor's weights there.
A component may be a chain of modules (a low-rank q, a sub-norm and its projection): each is
grafted so, in data-flow order.
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
_ATTENTION_NAMES = ("q", "k", "v", "o", "q_norm", "k_norm")
_MLP_NAMES = ("gate", "up", "down")
_NORM_NAMES = ("ln1", "ln2", "post_attn_norm", "post_mlp_norm")
_LATER_NAMES = ("router", "experts", "shared_expert", "shared_expert_gate", "kv_latent")  # MoE, multi-latent
PER_LAYER = _ATTENTION_NAMES + _MLP_NAMES + _NORM_NAMES + _LATER_NAMES
# A mixture-of-experts block's components: its router, its routed experts (one module holding
# every expert's weights on a leading axis) and, where the model has one, a shared expert and its
# gate. The adapter's `mlp_module` is the whole block, so the `mlp` group is all of them.
MOE_COMPONENTS = ("router", "experts", "shared_expert", "shared_expert_gate")
# How the engine calls a donor module on the grafted rows (`Adapter.call_forms`):
# "rows": on [rows, ...], taken from the module's [batch, seq, ...] input;
# "batched": on [1, rows, ...], and the result squeezed (a block that unpacks batch and sequence);
# "flat": the module sees [batch * seq, ...] tokens as its first axis (a MoE router or experts):
#   every tensor argument whose first axis is the tokens is taken at the rows, and every tensor
#   of its output (or of its output tuple) whose first axis is the tokens is spliced;
# "whole": the module's inputs are not rows of hidden states (OPT's and BioGPT's position
#   embeddings read the attention mask): the donor module is called on exactly the arguments the
#   recipient's module got in this forward, and the grafted rows of its [batch, seq, ...] output
#   are spliced;
# "per_expert": the module sees every token once per expert, expert-major ([experts * tokens,
#   ...]: row e * tokens + t is expert e on token t, as Llama 4's experts do); it is called on
#   the grafted tokens' rows of every expert, and single experts splice only their own rows.
CALL_FORMS = ("rows", "batched", "flat", "whole", "per_expert")
NORMS = ("ln1", "ln2", "q_norm", "k_norm", "post_attn_norm", "post_mlp_norm", "ln_final")
GROUPS = ("attn", "mlp", "norms", "all")
# The members of attn and mlp where an adapter has no attention or MLP submodule to read them off.
ATTN_PARTS = ("q", "k", "v", "o", "q_norm", "k_norm", "kv_latent")
# `kv_latent`: multi-latent attention's shared key-value latent (DeepSeek-V2's kv_a_proj_with_mqa
# latent columns and kv_a_layernorm), which k's and v's per-head projection reads.
MLP_PARTS = ("gate", "up", "down", "router", "experts", "shared_expert", "shared_expert_gate")


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
# A per-layer component is one module (or part), or a chain: several modules (or parts) that
# compute it together, each position-wise, listed in data-flow order (a low-rank q: q_a_proj,
# q_a_layernorm, q_b_proj). Grafting a chain grafts each of its modules at the same cells: each
# output is spliced from the donor module on the already spliced input, which equals computing
# the whole chain with the donor's weights there.
ComponentRef = ModuleRef | tuple[ModuleRef, ...]


def chain_of(entry: ComponentRef) -> tuple[ModuleRef, ...]:
    """The modules (or parts) a per-layer entry computes with, in data-flow order."""
    return entry if isinstance(entry, tuple) else (entry,)


def module_path(ref: ModuleRef) -> str:
    """The module a reference names (a part's fused module)."""
    return ref.module if isinstance(ref, Part) else ref


def model_level_paths(level: Mapping[str, str | tuple[str, ...]]) -> list[str]:
    """Every module path of a model-level table, a chain's modules each."""
    return [path for entry in level.values() for path in (entry if isinstance(entry, tuple) else (entry,))]


def is_chain(entry: ComponentRef) -> bool:
    """True for a component computed by several modules (or parts)."""
    return isinstance(entry, tuple) and len(entry) > 1


@dataclass(frozen=True)
class Adapter:
    """Where the canonical components of one architecture live.

    Paths in `per_layer` are relative to a decoder block; paths in `model_level` are relative to
    the causal-LM model itself. `attn_module` and `mlp_module` name the blocks' submodules whose
    parameters make up the `attn` and `mlp` groups ("" where the block holds those projections
    itself: the groups are then the canonical attention and MLP components).

    Args:
        model_types: the `config.model_type` values it serves (the first names it in errors).
        layers: the path of the decoder blocks' `ModuleList` ("model.layers").
        model_level: component -> module path in the model (embed, pos_embed, ln_final, lm_head),
            or a tuple of paths (a chain: BLOOM's embed is its embedding and the norm after it).
        per_layer: component -> module path in a block, a `Part` of a fused module, or a tuple of
            them (a chain, `ComponentRef`).
        attn_module: the blocks' attention submodule (the `attn` group).
        mlp_module: the blocks' MLP submodule (the `mlp` group).
        splits: fused module path -> rule(config) giving each part's output columns.
        seq_dims: block modules whose sequence axis is not dim 1 ({"self_attn.q_norm": 2}).
        call_forms: block modules not called on plain rows ({"mlp.gate": "flat"}, `CALL_FORMS`).
        model_call_forms: model-level modules (by path) not called on plain rows
            ({"model.decoder.embed_positions": "whole"}).
        history_modules: block modules that run over every cached position at each step.
        origin: "registered", "inferred" or "alias of T" (set by inference; runs record it).

    Raises:
        ValueError: a component name outside the vocabulary.
    """

    model_types: tuple[str, ...]
    layers: str
    model_level: Mapping[str, str | tuple[str, ...]]
    per_layer: Mapping[str, ComponentRef]
    attn_module: str
    mlp_module: str
    splits: Mapping[str, SplitRule] = field(default_factory=dict)
    # Per-layer modules whose sequence axis is not dim 1, e.g. {"self_attn.q_norm": 2} for a
    # norm applied to [batch, heads, seq, head_dim].
    seq_dims: Mapping[str, int] = field(default_factory=dict)
    # Where the table came from: "registered", "inferred" (adapters/infer.py) or "alias of T" (a
    # model of another type whose inferred table equals registered type T's). Runs record it.
    origin: str = "registered"
    # Per-layer modules not called as "rows" (see CALL_FORMS), e.g. {"mlp.gate": "flat"}.
    call_forms: Mapping[str, str] = field(default_factory=dict)
    # Model-level modules (paths as in model_level) not called as "rows", e.g. a position
    # embedding that reads the attention mask: {"model.decoder.embed_positions": "whole"}.
    model_call_forms: Mapping[str, str] = field(default_factory=dict)
    # Per-layer modules that run over every cached position at each step (multi-latent attention's
    # kv_b_proj expands the cached latent): the engine grafts them in passes without a KV cache.
    history_modules: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [c for c in self.model_level if c not in MODEL_LEVEL]
        unknown += [c for c in self.per_layer if c not in PER_LAYER]
        if unknown:
            raise ValueError(
                f"adapter for {self.model_types} uses non-canonical components {unknown}; "
                f"model-level names are {list(MODEL_LEVEL)}, per-layer names are {list(PER_LAYER)}"
            )
        forms = {**self.call_forms, **self.model_call_forms}
        wrong = {path: form for path, form in forms.items() if form not in CALL_FORMS}
        if wrong:
            raise ValueError(
                f"adapter for {self.model_types} gives unknown call forms {wrong}; use one of {CALL_FORMS}"
            )
        stray = sorted(set(self.model_call_forms) - set(model_level_paths(self.model_level)))
        if stray:
            raise ValueError(
                f"adapter for {self.model_types} gives model_call_forms for {stray}, not model_level paths"
            )
        for comp, entry in self.per_layer.items():
            if isinstance(entry, tuple) and not entry:
                raise ValueError(f"component {comp!r} is an empty chain; name at least one module")
            for ref in chain_of(entry):
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
        module = {"attn": self.attn_module, "mlp": self.mlp_module}[name]
        if not module:  # the block holds these projections itself (OPT's fc1 and fc2): by name
            return tuple(c for c in self.components if c in {"attn": ATTN_PARTS, "mlp": MLP_PARTS}[name])
        prefix = module + "."
        return tuple(c for c, entry in self.per_layer.items() if module_path(chain_of(entry)[0]).startswith(prefix))

    def call_form(self, local: str) -> str:
        """How the engine calls the per-layer module at `local` (a path inside a block) on rows."""
        return self.call_forms.get(local, "rows")

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


def model_type_of(model: nn.Module | PretrainedConfig | str) -> str | None:
    if isinstance(model, str):
        return model
    config = model if isinstance(model, PretrainedConfig) else getattr(model, "config", None)
    return getattr(config, "model_type", None)


def registered_adapter(model: nn.Module | PretrainedConfig | str) -> Adapter | None:
    """The adapter registered for a model's `config.model_type` (or a model_type string), if any."""
    return _REGISTRY.get(model_type_of(model))


def registered_adapters() -> list[Adapter]:
    """Each registered adapter once, in registration order."""
    return list({id(a): a for a in _REGISTRY.values()}.values())


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
