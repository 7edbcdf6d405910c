"""Units finer than a component: attention heads, FFN neurons and mixture-of-experts experts.

A head or neuron of a component is a block of columns of its module's weight (a component that
is a chain of several modules, `adapters.base.ComponentRef`, has none and is grafted whole,
except an o or down whose earlier modules are per-feature, a sub-norm: a unit is then its
features in each module):

- `q`, `k`, `v` heads and `gate`, `up` neurons are *output* columns: grafting them replaces
  those columns of the module's output (through the fused split for GPT-2's `c_attn`, NeoX's
  interleaved `query_key_value`, Phi-3's `qkv_proj` and `gate_up_proj`). `k`/`v` heads are
  key-value heads (grouped-query models have fewer of them than query heads).
- `o` heads and `down` neurons are *input* columns: head h writes into the residual stream
  through W_o[:, cols of h]. Grafting heads H gives `R(x) + sum_{h in H} (W_donor[:, h] -
  W_recipient[:, h]) x[h]`: the recipient's output plus the donor's change to those columns.

The bias of `o` and `down` (one vector for every head or neuron) belongs to the whole
component: a strict subset of heads or neurons keeps the recipient's bias, and a selection of
every unit is the whole component, bias included.

An expert of `experts` (one module holding every expert's weights on the leading axis of its
3-D parameters) is index e on that axis: grafting experts S computes each token's chosen experts
in S with the donor's weights and the others with the recipient's (`engine.flat_splice`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from weightgraft.adapters.base import Adapter, Part, chain_of, is_chain, module_path
from weightgraft.adapters.call_forms import experts_count
from weightgraft.errors import UserError

HEAD_COMPONENTS = ("q", "k", "v", "o")
NEURON_COMPONENTS = ("gate", "up", "down")
EXPERT_COMPONENTS = ("experts",)

# What some units of a key's module cover: (output columns, input columns, experts).
UnitColumns = tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]


class UnitError(UserError, ValueError):
    """A head or neuron selection that does not fit the graft or the model."""


@dataclass(frozen=True)
class UnitSpec:
    """How one component divides into units: `count` units of `width` consecutive columns on
    the module's output (`side="out"`) or input (`side="in"`)."""

    kind: Literal["head", "kv_head", "neuron", "expert"]
    side: Literal["out", "in", "expert"]
    count: int
    width: int

    def columns(self, units: frozenset[int]) -> torch.Tensor:
        """Column indices (in the component's own output or the module's input) of `units`."""
        starts = torch.tensor(sorted(units), dtype=torch.long) * self.width
        return (starts[:, None] + torch.arange(self.width)[None, :]).reshape(-1)


def _in_features(module: nn.Module) -> int:
    weight = module.weight
    return weight.shape[0] if type(module).__name__ == "Conv1D" else weight.shape[-1]


def _out_features(module: nn.Module) -> int:
    weight = module.weight
    return weight.shape[1] if type(module).__name__ == "Conv1D" else weight.shape[0]


def _per_channel_before(layer: nn.Module, chain: tuple, comp: str) -> bool:
    """Whether an o or down chain is per-channel modules (a sub-norm's weights, one per input
    feature) before its last projection: a head or neuron is then those features' weights in
    each module (`Grafter._partial_columns` grafts the earlier modules' output columns)."""
    if comp not in ("o", "down") or any(isinstance(ref, Part) for ref in chain):
        return False
    width = _in_features(layer.get_submodule(chain[-1]))
    for path in chain[:-1]:
        params = list(layer.get_submodule(path).parameters())
        if not params or any(p.dim() != 1 or p.numel() != width for p in params):
            return False
    return True


def unit_specs(adapter: Adapter, model: nn.Module, splits: dict[str, dict[str, torch.Tensor]]) -> dict[str, UnitSpec]:
    """The units of every head and neuron component this model has, read from layer 0's modules
    and the config's head counts."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "num_attention_heads", None) is None:
        raise UnitError(
            f"this {adapter.model_types[0]} model's config has no num_attention_heads, so its heads and neurons "
            "cannot be told apart; give the config num_attention_heads (and num_key_value_heads) to graft them"
        )
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    layer = adapter.decoder_layers(model)[0]
    out: dict[str, UnitSpec] = {}
    for comp in HEAD_COMPONENTS + NEURON_COMPONENTS:
        ref = adapter.per_layer.get(comp)
        if ref is None or (is_chain(ref) and not _per_channel_before(layer, ref, comp)):
            continue  # a chain's units span several modules: only o's and down's may have them
        ref = chain_of(ref)[-1]
        module = layer.get_submodule(ref.module if isinstance(ref, Part) else ref)
        if comp in ("o", "down"):
            width = _in_features(module)
            side = "in"
        else:
            width = len(splits[ref.module][ref.part]) if isinstance(ref, Part) else _out_features(module)
            side = "out"
        if comp in NEURON_COMPONENTS:
            out[comp] = UnitSpec("neuron", side, width, 1)
        else:
            count = kv_heads if comp in ("k", "v") else heads
            out[comp] = UnitSpec("kv_head" if comp in ("k", "v") else "head", side, count, width // count)
    ref = adapter.per_layer.get("experts")
    count = experts_count(layer.get_submodule(module_path(chain_of(ref)[-1]))) if ref else None
    if count is not None:
        out["experts"] = UnitSpec("expert", "expert", count, 1)
    return out


def unit_columns(spec: UnitSpec, fused: torch.Tensor | None, units: frozenset, device: torch.device) -> UnitColumns:
    """What `units` of a component cover on its module: output columns (through the fused part's
    columns `fused`, if any), input columns, or experts."""
    own = spec.columns(units).to(device)
    if spec.side == "expert":
        return None, None, own
    if spec.side == "in":
        return None, own, None
    return (own if fused is None else fused[own]), None, None


def check_units(units: tuple[int, ...], components: list[str], specs: dict[str, UnitSpec], model_type: str) -> None:
    """Every index in range for every component it applies to; the message names the counts."""
    for comp in components:
        spec = specs.get(comp)
        if spec is None and comp in HEAD_COMPONENTS + NEURON_COMPONENTS:
            raise UnitError(
                f"this {model_type} model's {comp!r} is computed by several modules in sequence (a chain, such as a "
                "low-rank q or multi-latent attention's k), so its heads or neurons cannot be grafted apart; graft "
                f"{comp!r} whole"
            )
        if spec is None:
            raise UnitError(
                f"this {model_type} model's {comp!r} holds no per-expert weights (3-D parameters with the experts "
                "on their leading axis), so it has no single experts; graft it whole"
            )
        bad = [u for u in units if u >= spec.count]
        if not bad:
            continue
        if spec.kind == "expert":
            raise UnitError(
                f"expert {bad[0]} is out of range for {comp!r}: this {model_type} model's MoE blocks have "
                f"{spec.count} experts (0..{spec.count - 1}); pick experts in that range"
            )
        if spec.kind == "neuron":
            raise UnitError(
                f"neuron {bad[0]} is out of range for {comp!r}: this {model_type} model's FFN has "
                f"{spec.count} neurons (0..{spec.count - 1}); pick neurons in that range"
            )
        q = next((s.count for c, s in specs.items() if s.kind == "head"), spec.count)
        kv = next((s.count for c, s in specs.items() if s.kind == "kv_head"), q)
        raise UnitError(
            f"head {bad[0]} is out of range for {comp!r}: this {model_type} model has {q} query heads "
            f"(q, o: 0..{q - 1}) and {kv} key-value heads (k, v: 0..{kv - 1}); pick heads in that range"
        )
