"""A deliberately slow, independent reference of dynamic weight grafting (arXiv 2506.20746).

For each token t, left to right: take a fresh deep copy of the recipient, untie its input and
output embeddings, copy in the donor's parameters for exactly what is grafted at t (only the
rows/columns of a fused matrix that belong to the grafted component), and run that one token
against the KV cache accumulated so far. This is the paper's method made exact; it shares no code
with the engine. Its parameter table below was written from the HF modeling files.

A graft is described here by a plain `GraftSpec` (positions, layers, components, donor) that the
tests turn into a `weightgraft.Graft` and also resolve on their own with `resolve_row`. Several
donors: pass `{name: model}` where a donor model is taken; each spec's `donor` names its model
(None: the only one). This module must not import weightgraft.engine.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import DynamicCache

# ----------------------------------------------------------------------------------------------
# Canonical components -> HF parameters, per model_type.
#
# A "piece" is (module_path, rows) where rows is None (the whole module: weight and bias, if any)
# or a LongTensor of output-feature indices to take from the module's weight and bias. The output
# feature dimension is 0 for nn.Linear and 1 for GPT-2's Conv1D (weight [in, out]).
# ----------------------------------------------------------------------------------------------

PER_LAYER = [
    "q",
    "k",
    "v",
    "o",
    "gate",
    "up",
    "down",
    "ln1",
    "ln2",
    "q_norm",
    "k_norm",
    "post_attn_norm",
    "post_mlp_norm",
    "router",
    "experts",
    "shared_expert",
    "shared_expert_gate",
    "kv_latent",
]
MODEL_LEVEL = ["embed", "pos_embed", "ln_final", "lm_head"]
GROUPS = ["attn", "mlp", "norms", "all"]
ATTN_GROUP = ["q", "k", "v", "o", "q_norm", "k_norm", "kv_latent"]
MLP_GROUP = ["gate", "up", "down", "router", "experts", "shared_expert", "shared_expert_gate"]
NORM_COMPONENTS = ["ln1", "ln2", "q_norm", "k_norm", "post_attn_norm", "post_mlp_norm"]


def _span(start: int, stop: int) -> torch.Tensor:
    return torch.arange(start, stop)


def _gpt2_table(config) -> tuple[dict, dict]:
    d = config.n_embd
    layer = {
        "q": [("attn.c_attn", _span(0, d))],
        "k": [("attn.c_attn", _span(d, 2 * d))],
        "v": [("attn.c_attn", _span(2 * d, 3 * d))],
        "o": [("attn.c_proj", None)],
        "up": [("mlp.c_fc", None)],
        "down": [("mlp.c_proj", None)],
        "ln1": [("ln_1", None)],
        "ln2": [("ln_2", None)],
    }
    model = {
        "embed": [("transformer.wte", None)],
        "pos_embed": [("transformer.wpe", None)],
        "ln_final": [("transformer.ln_f", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model


def _neox_table(config) -> tuple[dict, dict]:
    # query_key_value output is viewed as [heads, 3 * head_size] and chunked q|k|v per head.
    heads = config.num_attention_heads
    hs = config.hidden_size // heads

    def part(which: int) -> torch.Tensor:
        return torch.cat([_span(h * 3 * hs + which * hs, h * 3 * hs + (which + 1) * hs) for h in range(heads)])

    layer = {
        "q": [("attention.query_key_value", part(0))],
        "k": [("attention.query_key_value", part(1))],
        "v": [("attention.query_key_value", part(2))],
        "o": [("attention.dense", None)],
        "up": [("mlp.dense_h_to_4h", None)],
        "down": [("mlp.dense_4h_to_h", None)],
        "ln1": [("input_layernorm", None)],
        "ln2": [("post_attention_layernorm", None)],
    }
    model = {
        "embed": [("gpt_neox.embed_in", None)],
        "ln_final": [("gpt_neox.final_layer_norm", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model


def _llama_family_table(config) -> tuple[dict, dict]:
    kind = config.model_type
    layer = {
        "q": [("self_attn.q_proj", None)],
        "k": [("self_attn.k_proj", None)],
        "v": [("self_attn.v_proj", None)],
        "o": [("self_attn.o_proj", None)],
        "gate": [("mlp.gate_proj", None)],
        "up": [("mlp.up_proj", None)],
        "down": [("mlp.down_proj", None)],
    }
    if kind in ("gemma2", "gemma3_text"):
        # input_layernorm -> attn -> post_attention_layernorm -> + ; pre_feedforward -> mlp -> post_feedforward -> +
        layer.update(
            {
                "ln1": [("input_layernorm", None)],
                "post_attn_norm": [("post_attention_layernorm", None)],
                "ln2": [("pre_feedforward_layernorm", None)],
                "post_mlp_norm": [("post_feedforward_layernorm", None)],
            }
        )
    elif kind == "olmo2":
        # no pre-norms: attn -> post_attention_layernorm -> + ; mlp -> post_feedforward_layernorm -> +
        layer.update(
            {
                "post_attn_norm": [("post_attention_layernorm", None)],
                "post_mlp_norm": [("post_feedforward_layernorm", None)],
            }
        )
    else:  # llama, mistral, qwen2, qwen3, gemma: post_attention_layernorm is the pre-MLP norm
        layer.update(
            {
                "ln1": [("input_layernorm", None)],
                "ln2": [("post_attention_layernorm", None)],
            }
        )
    if kind in ("qwen3", "olmo2", "gemma3_text"):
        layer["q_norm"] = [("self_attn.q_norm", None)]
        layer["k_norm"] = [("self_attn.k_norm", None)]
    if kind == "phi3":
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        nq = config.num_attention_heads * head_dim
        nkv = config.num_key_value_heads * head_dim
        inter = config.intermediate_size
        layer["q"] = [("self_attn.qkv_proj", _span(0, nq))]
        layer["k"] = [("self_attn.qkv_proj", _span(nq, nq + nkv))]
        layer["v"] = [("self_attn.qkv_proj", _span(nq + nkv, nq + 2 * nkv))]
        layer["gate"] = [("mlp.gate_up_proj", _span(0, inter))]  # chunk(2): gate first
        layer["up"] = [("mlp.gate_up_proj", _span(inter, 2 * inter))]
    model = {
        "embed": [("model.embed_tokens", None)],
        "ln_final": [("model.norm", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model


def _toy_table(config) -> tuple[dict, dict]:
    # tests/support/toy_decoder.py, read off its source: Cell = pre_mix -> mix -> + ; pre_feed -> feed -> +
    layer = {
        "q": [("mix.ask", None)],
        "k": [("mix.offer", None)],
        "v": [("mix.carry", None)],
        "o": [("mix.emit", None)],
        "gate": [("feed.valve", None)],
        "up": [("feed.widen", None)],
        "down": [("feed.narrow", None)],
        "ln1": [("pre_mix", None)],
        "ln2": [("pre_feed", None)],
    }
    model = {
        "embed": [("trunk.words", None)],
        "pos_embed": [("trunk.where", None)],
        "ln_final": [("trunk.last_scale", None)],
        "lm_head": [("reader", None)],
    }
    return layer, model


LLAMA_FAMILY = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo2", "phi3"]


# Tables for model types with no hand-written table here, registered by the caller (the census
# reads them off an adapter's module paths: the reference then checks the engine's mechanics).
EXTRA_TABLES: dict[str, tuple[dict, dict, str]] = {}


def register_table(model_type: str, table: tuple[dict, dict, str]) -> None:
    EXTRA_TABLES[model_type] = table


def _moe_table(config) -> tuple[dict, dict]:
    """Mixtral, OLMoE, Qwen3-MoE, Qwen2-MoE (transformers 5): a Llama-style decoder layer whose `mlp`
    is a sparse block: `gate` the top-k router (weight [experts, hidden]), `experts` every expert's
    gate_up_proj [experts, 2 * inter, hidden] and down_proj [experts, hidden, inter]; Qwen2-MoE adds
    `shared_expert` (an MLP) and `shared_expert_gate` (Linear hidden -> 1)."""
    layer = {
        "q": [("self_attn.q_proj", None)],
        "k": [("self_attn.k_proj", None)],
        "v": [("self_attn.v_proj", None)],
        "o": [("self_attn.o_proj", None)],
        "ln1": [("input_layernorm", None)],
        "ln2": [("post_attention_layernorm", None)],
        "router": [("mlp.gate", None)],
        "experts": [("mlp.experts", None)],
    }
    if config.model_type in ("olmoe", "qwen3_moe"):
        layer["q_norm"] = [("self_attn.q_norm", None)]
        layer["k_norm"] = [("self_attn.k_norm", None)]
    if config.model_type == "qwen2_moe":
        layer["shared_expert"] = [("mlp.shared_expert", None)]
        layer["shared_expert_gate"] = [("mlp.shared_expert_gate", None)]
    model = {
        "embed": [("model.embed_tokens", None)],
        "ln_final": [("model.norm", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model


MOE_FAMILY = ["mixtral", "olmoe", "qwen3_moe", "qwen2_moe"]


def _mla_table(config) -> tuple[dict, dict]:
    """Multi-latent attention (modeling_deepseek_v3.py, modeling_minicpm3.py): q is q_proj, or with
    q_lora_rank q_b_proj(q_a_layernorm(q_a_proj(x))); kv_a_proj_with_mqa's output is [latent
    (kv_lora_rank) | rotary key (qk_rope_head_dim)], the latent goes through kv_a_layernorm into the
    cache, and expand_kv runs kv_b_proj on it, whose output is per head [k_nope | v]. So k is the
    rotary key's rows of kv_a plus the k_nope rows of kv_b, v the v rows, and kv_latent the latent
    rows of kv_a with kv_a_layernorm. MiniCPM3 has a dense MLP, DeepSeek-V3 (all layers MoE here)
    a router `gate`, `experts` and `shared_experts`."""
    r, rope = config.kv_lora_rank, config.qk_rope_head_dim
    nope, vd, heads = config.qk_nope_head_dim, config.v_head_dim, config.num_attention_heads
    per = nope + vd
    q = [("self_attn.q_proj", None)]
    if config.q_lora_rank is not None:
        q = [("self_attn.q_a_proj", None), ("self_attn.q_a_layernorm", None), ("self_attn.q_b_proj", None)]
    layer = {
        "q": q,
        "k": [
            ("self_attn.kv_a_proj_with_mqa", _span(r, r + rope)),
            ("self_attn.kv_b_proj", torch.cat([_span(h * per, h * per + nope) for h in range(heads)])),
        ],
        "v": [("self_attn.kv_b_proj", torch.cat([_span(h * per + nope, (h + 1) * per) for h in range(heads)]))],
        "kv_latent": [("self_attn.kv_a_proj_with_mqa", _span(0, r)), ("self_attn.kv_a_layernorm", None)],
        "o": [("self_attn.o_proj", None)],
        "ln1": [("input_layernorm", None)],
        "ln2": [("post_attention_layernorm", None)],
    }
    if config.model_type == "minicpm3":
        layer |= {"gate": [("mlp.gate_proj", None)], "up": [("mlp.up_proj", None)], "down": [("mlp.down_proj", None)]}
    else:
        layer |= {
            "router": [("mlp.gate", None)],
            "experts": [("mlp.experts", None)],
            "shared_expert": [("mlp.shared_experts", None)],
        }
    model = {
        "embed": [("model.embed_tokens", None)],
        "ln_final": [("model.norm", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model


def _chain_table(config) -> tuple[dict, dict]:
    """Llama-shaped blocks with modules on a projection's path. BitNet (modeling_bitnet.py):
    o_proj reads attn_sub_norm(attention output), down_proj reads ffn_sub_norm(act(gate) * up),
    so o and down take their sub-norm with them. Apertus (modeling_apertus.py): down_proj reads
    act_fn(up_proj(x)), an xIELU with parameters, which goes with up; no gate; q/k norms; its
    block norms are attention_layernorm and feedforward_layernorm."""
    layer = {
        "q": [("self_attn.q_proj", None)],
        "k": [("self_attn.k_proj", None)],
        "v": [("self_attn.v_proj", None)],
        "o": [("self_attn.o_proj", None)],
        "up": [("mlp.up_proj", None)],
        "down": [("mlp.down_proj", None)],
    }
    if config.model_type == "bitnet":
        layer["o"] = [("self_attn.attn_sub_norm", None), ("self_attn.o_proj", None)]
        layer["down"] = [("mlp.ffn_sub_norm", None), ("mlp.down_proj", None)]
        layer |= {"gate": [("mlp.gate_proj", None)], "ln1": [("input_layernorm", None)]}
        layer["ln2"] = [("post_attention_layernorm", None)]
    else:
        layer["up"] = [("mlp.up_proj", None), ("mlp.act_fn", None)]
        layer |= {"q_norm": [("self_attn.q_norm", None)], "k_norm": [("self_attn.k_norm", None)]}
        layer |= {"ln1": [("attention_layernorm", None)], "ln2": [("feedforward_layernorm", None)]}
    model = {
        "embed": [("model.embed_tokens", None)],
        "ln_final": [("model.norm", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model


def _bloom_table(config) -> tuple[dict, dict]:
    """BLOOM (modeling_bloom.py): query_key_value viewed as [heads, 3, head_dim] (q, k, v per
    head); the embedding goes through word_embeddings_layernorm before the first block, so embed
    is both; no position embedding (ALiBi)."""
    heads = config.n_head
    hd = config.hidden_size // heads

    def part(which: int) -> torch.Tensor:
        return torch.cat([_span(h * 3 * hd + which * hd, h * 3 * hd + (which + 1) * hd) for h in range(heads)])

    layer = {
        "q": [("self_attention.query_key_value", part(0))],
        "k": [("self_attention.query_key_value", part(1))],
        "v": [("self_attention.query_key_value", part(2))],
        "o": [("self_attention.dense", None)],
        "up": [("mlp.dense_h_to_4h", None)],
        "down": [("mlp.dense_4h_to_h", None)],
        "ln1": [("input_layernorm", None)],
        "ln2": [("post_attention_layernorm", None)],
    }
    model = {
        "embed": [("transformer.word_embeddings", None), ("transformer.word_embeddings_layernorm", None)],
        "ln_final": [("transformer.ln_f", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model


CHAIN_FAMILY = ["bitnet", "apertus"]
MLA_FAMILY = ["minicpm3", "deepseek_v3"]
# Modules run over every cached position at each step, and the axis of their positions: expand_kv
# applies kv_b_proj to the cached latent [batch, 1, seq, kv_lora_rank]. A graft at position j must
# compute position j's key and value with j's weights at every later step too, so the reference
# gives such a module per-position weights (`_per_position_history`; `reference_logits` only:
# `reference_unit_logits` does not, so a head graft of an MLA model's v is not checked against it).
HISTORY_MODULES = {"self_attn.kv_b_proj": 2}


def component_table(config) -> tuple[dict, dict, str]:
    """(per-layer table, model-level table, decoder-layer path prefix with {i})."""
    kind = config.model_type
    if kind == "gpt2":
        return (*_gpt2_table(config), "transformer.h.{i}.")
    if kind == "gpt_neox":
        return (*_neox_table(config), "gpt_neox.layers.{i}.")
    if kind in LLAMA_FAMILY:
        return (*_llama_family_table(config), "model.layers.{i}.")
    if kind in MLA_FAMILY:
        return (*_mla_table(config), "model.layers.{i}.")
    if kind in CHAIN_FAMILY:
        return (*_chain_table(config), "model.layers.{i}.")
    if kind == "bloom":
        return (*_bloom_table(config), "transformer.h.{i}.")
    if kind == "toy_decoder":
        return (*_toy_table(config), "trunk.cells.{i}.")
    if kind in EXTRA_TABLES:
        return EXTRA_TABLES[kind]
    if kind in MOE_FAMILY:
        return (*_moe_table(config), "model.layers.{i}.")
    raise KeyError(f"no reference table for model_type {kind!r}")


def leaf_components(config) -> list[str]:
    layer, model, _ = component_table(config)
    return [c for c in PER_LAYER if c in layer] + [c for c in MODEL_LEVEL if c in model]


def _pieces(config, component: str, layer_index: int | None) -> list[tuple[str, Any]]:
    layer, model, prefix = component_table(config)
    if layer_index is None:
        return list(model[component])
    return [(prefix.format(i=layer_index) + path, rows) for path, rows in layer[component]]


def _is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D"


def parameter_slices(model, component: str, layer_index: int | None):
    """[(full parameter name, dim, indices or None)] that make up one component."""
    out = []
    for path, rows in _pieces(model.config, component, layer_index):
        module = model.get_submodule(path)
        if rows is None:  # the whole module, submodules included (a shared expert is an MLP)
            out += [(f"{path}.{pname}", 0, None) for pname, _ in module.named_parameters()]
            continue
        for pname, _param in module.named_parameters(recurse=False):
            dim = 1 if (_is_conv1d(module) and pname == "weight") else 0
            out.append((f"{path}.{pname}", dim, rows))
    return out


# ----------------------------------------------------------------------------------------------
# Resolving a graft for one row, independently of the engine.
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraftSpec:
    positions: Any = "all"
    layers: Any = "all"
    components: Any = "all"
    donor: str | None = None
    heads: Any = None  # q/k/v/o heads (k, v: key-value heads)
    neurons: Any = None  # gate/up/down neurons
    experts: Any = None  # experts of a MoE block's experts module


def _bands(num_layers: int) -> dict[str, list[int]]:
    def band(k, n):
        return list(range(k * num_layers // n, (k + 1) * num_layers // n))

    out = {
        "first_half": band(0, 2),
        "last_half": band(1, 2),
        "first_quarter": band(0, 4),
        "second_quarter": band(1, 4),
        "third_quarter": band(2, 4),
        "last_quarter": band(3, 4),
    }
    for k in range(8):
        out[f"eighth_{k + 1}"] = band(k, 8)
    return out


def resolve_positions(positions, n: int) -> list[int]:
    if isinstance(positions, str):
        if positions == "all":
            return list(range(n))
        if positions == "last":
            return [n - 1]
        raise ValueError(positions)
    if isinstance(positions, slice):
        return list(range(n))[positions]
    if isinstance(positions, torch.Tensor):
        positions = positions.tolist()
    if isinstance(positions, int):
        positions = [positions]
    positions = list(positions)
    if positions and all(isinstance(p, bool) for p in positions):
        if len(positions) != n:
            raise ValueError("mask length")
        return [i for i, keep in enumerate(positions) if keep]
    out = []
    for p in positions:
        if not -n <= p < n:
            raise ValueError("position outside row")
        out.append(p % n)
    return sorted(set(out))


def resolve_layers(layers, num_layers: int) -> list[int]:
    if isinstance(layers, str):
        if layers == "all":
            return list(range(num_layers))
        return _bands(num_layers)[layers]
    if isinstance(layers, int):
        layers = [layers]
    return sorted({i % num_layers for i in layers})


def resolve_components(components, config, layers_is_all: bool) -> tuple[set, set]:
    """(per-layer components, model-level components) that `components` names on this model."""
    layer_table, model_table, _ = component_table(config)
    names = [components] if isinstance(components, str) else list(components)
    per_layer, model_level = set(), set()
    for name in names:
        if name in layer_table:
            per_layer.add(name)
        elif name in model_table:
            model_level.add(name)  # named explicitly: grafted whatever `layers` says
        elif name == "attn":
            per_layer |= {c for c in ATTN_GROUP if c in layer_table}
        elif name == "mlp":
            per_layer |= {c for c in MLP_GROUP if c in layer_table}
        elif name == "norms":
            per_layer |= {c for c in NORM_COMPONENTS if c in layer_table}
            if layers_is_all:
                model_level.add("ln_final")
        elif name == "all":
            per_layer |= set(layer_table)
            if layers_is_all:
                model_level |= set(model_table)
        else:
            raise ValueError(f"reference: {name!r} not on {config.model_type}")
    return per_layer, model_level


def resolve_row_donors(specs, n: int, config) -> list[dict]:
    """For each of the row's n real tokens, {(component, layer or None): donor name} grafted
    there (name None: the only donor). Two donors for one key at one token is an error."""
    if specs is None:
        specs = []
    if isinstance(specs, GraftSpec):
        specs = [specs]
    num_layers = config.get_text_config().num_hidden_layers
    plan = [{} for _ in range(n)]
    for spec in specs:
        layers_is_all = isinstance(spec.layers, str) and spec.layers == "all"
        per_layer, model_level = resolve_components(spec.components, config, layers_is_all)
        keys = {(c, i) for c in per_layer for i in resolve_layers(spec.layers, num_layers)}
        keys |= {(c, None) for c in model_level}
        for t in resolve_positions(spec.positions, n):
            for key in keys:
                if plan[t].get(key, spec.donor) != spec.donor:
                    raise ValueError(f"reference: {key} at token {t} from {plan[t][key]!r} and {spec.donor!r}")
                plan[t][key] = spec.donor
    return plan


def resolve_row(specs, n: int, config) -> list[set]:
    """For each of the row's n real tokens, the set of (component, layer or None) grafted there."""
    return [set(grafted) for grafted in resolve_row_donors(specs, n, config)]


# ----------------------------------------------------------------------------------------------
# The per-token reference.
# ----------------------------------------------------------------------------------------------


def untied_copy(model):
    """Deep copy with the output embedding given its own storage (so grafting one leaves the other)."""
    fresh = copy.deepcopy(model)
    out_emb = fresh.get_output_embeddings()
    if out_emb is not None and out_emb.weight is fresh.get_input_embeddings().weight:
        out_emb.weight = nn.Parameter(out_emb.weight.detach().clone())
    return fresh


def _donor_model(donors, name):
    """The model a spec's donor name means: `donors` is one model or {name: model}."""
    if isinstance(donors, dict):
        if name is None:
            if len(donors) != 1:
                raise ValueError("reference: a spec names no donor, but there are several")
            return next(iter(donors.values()))
        return donors[name]
    if name is not None:
        raise ValueError(f"reference: a spec names donor {name!r}, but only one donor model was given")
    return donors


def _copy_slices(params: dict, donor_params: dict, pieces) -> None:
    """Copy each (parameter name, dim, rows) piece from the donor's parameters into `params`;
    rows None is the whole parameter."""
    for pname, dim, rows in pieces:
        target, source = params[pname], donor_params[pname]
        if rows is None:
            target.copy_(source)
        else:
            target.index_copy_(dim, rows, source.index_select(dim, rows))


@torch.no_grad()
def graft_into(model, donors, grafted) -> None:
    """Copy donor parameters into `model` for every grafted (component, layer): `grafted` is a set
    (all from the one donor) or {(component, layer): donor name}."""
    if not isinstance(grafted, dict):
        grafted = dict.fromkeys(grafted)
    params = dict(model.named_parameters(remove_duplicate=False))
    for (component, layer_index), name in grafted.items():
        donor_params = dict(_donor_model(donors, name).named_parameters(remove_duplicate=False))
        _copy_slices(params, donor_params, parameter_slices(model, component, layer_index))


class _PerPosition(nn.Module):
    """Position j (along `axis` of the input) computed by its own module `copies[j]`."""

    def __init__(self, copies: list[nn.Module], axis: int):
        super().__init__()
        self.copies, self.axis = nn.ModuleList(copies), axis

    def forward(self, x):
        outs = [self.copies[j](x.narrow(self.axis, j, 1)) for j in range(x.shape[self.axis])]
        return torch.cat(outs, dim=self.axis)


@torch.no_grad()
def _per_position_history(model, recipient, donors, history: list) -> None:
    """Give each history module of `model` (HISTORY_MODULES) one copy per position j <= t, carrying
    the donor slices grafted at j (`history[j]`, as `resolve_row_donors` gives)."""
    _, _, prefix = component_table(recipient.config)
    num_layers = recipient.config.get_text_config().num_hidden_layers
    for local, axis in HISTORY_MODULES.items():
        for i in range(num_layers):
            path = prefix.format(i=i) + local
            try:
                own = recipient.get_submodule(path)
            except AttributeError:
                continue
            copies = []
            for grafted in history:
                piece = copy.deepcopy(own)
                params = dict(piece.named_parameters())
                for (component, layer_index), name in grafted.items():
                    if layer_index != i:
                        continue
                    donor = _donor_model(donors, name).get_submodule(path)
                    theirs = dict(donor.named_parameters())
                    found = parameter_slices(recipient, component, i)
                    mine = [(n[len(path) + 1 :], d, rows) for n, d, rows in found if n.startswith(path + ".")]
                    _copy_slices(params, theirs, mine)
                copies.append(piece)
            parent, _, leaf = path.rpartition(".")
            setattr(model.get_submodule(parent), leaf, _PerPosition(copies, axis))


@torch.no_grad()
def _step(recipient, donors, token: int, t: int, grafted, cache, history=None):
    model = untied_copy(recipient)
    graft_into(model, donors, grafted)
    if history is not None:
        _per_position_history(model, recipient, donors, history)
    out = model(
        input_ids=torch.tensor([[token]]),
        position_ids=torch.tensor([[t]]),
        attention_mask=torch.ones(1, t + 1, dtype=torch.long),
        past_key_values=cache,
        use_cache=True,
    )
    return out.logits[0, -1], out.past_key_values


@torch.no_grad()
def reference_logits(recipient, donors, ids, specs) -> torch.Tensor:
    """Logits [n, vocab] for one unpadded row `ids` (1-D) under `specs` (GraftSpec(s) or None);
    `donors` is the donor model or {name: model}."""
    ids = [int(x) for x in ids]
    plan = resolve_row_donors(specs, len(ids), recipient.config)
    cache = DynamicCache(config=recipient.config)
    rows = []
    for t, token in enumerate(ids):
        logits, cache = _step(recipient, donors, token, t, plan[t], cache, plan[: t + 1])
        rows.append(logits)
    return torch.stack(rows)


@torch.no_grad()
def static_graft_logits(recipient, donors, ids, grafted) -> torch.Tensor:
    """Logits [n, vocab] when the same (component, layer) set is grafted at every token: then the
    per-token reference reduces to one patched copy run over the whole row (a shortcut the
    reference self-tests confirm)."""
    model = untied_copy(recipient)
    graft_into(model, donors, grafted)
    return model(input_ids=torch.as_tensor(ids).view(1, -1)).logits[0]


@torch.no_grad()
def reference_generate(recipient, donors, ids, specs, max_new_tokens: int, generated: str = "none"):
    """Greedy continuation (list of new token ids) of one unpadded row, token by token.

    generated="none": generated tokens run on the plain recipient; "last": each generated token
    gets the grafts of the row's last prompt token.
    """
    ids = [int(x) for x in ids]
    n = len(ids)
    plan = resolve_row_donors(specs, n, recipient.config)
    cache = DynamicCache(config=recipient.config)
    logits = None
    for t, token in enumerate(ids):
        logits, cache = _step(recipient, donors, token, t, plan[t], cache)
    new_tokens = []
    for j in range(max_new_tokens):
        token = int(torch.argmax(logits))
        new_tokens.append(token)
        if j == max_new_tokens - 1:
            break
        grafted = {} if generated == "none" else plan[n - 1]
        logits, cache = _step(recipient, donors, token, n + j, grafted, cache)
    return new_tokens


# ----------------------------------------------------------------------------------------------
# Heads and neurons: the weight slices of some units of a component, written from the HF
# modeling files. q/k/v heads and gate/up neurons are output features (rows of a Linear weight,
# columns of a Conv1D weight, with the bias entries); o heads and down neurons are input features
# (columns of a Linear weight, rows of a Conv1D weight), without the bias, which belongs to the
# whole component. A selection of every unit is the whole component.
# ----------------------------------------------------------------------------------------------


def unit_counts(config) -> dict[str, tuple[int, int]]:
    """component -> (number of units, features per unit) for the head and neuron components."""
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    hidden = config.hidden_size
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    layer, _, _ = component_table(config)
    if config.model_type == "gpt2":
        inner = config.n_inner or 4 * hidden
    else:
        inner = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * hidden
    out = {"q": (heads, head_dim), "k": (kv, head_dim), "v": (kv, head_dim), "o": (heads, head_dim)}
    if "kv_latent" in layer:  # multi-latent attention: a key and a value per query head, v_head_dim wide
        out |= {"v": (heads, config.v_head_dim), "o": (heads, config.v_head_dim)}
    for name in ("gate", "up", "down"):
        if name in layer:
            out[name] = (inner, 1)
    if "experts" in layer:
        out["experts"] = (_experts_count(config), 1)
    return out


def _experts_count(config) -> int:
    """Experts per MoE layer, by the config's own field (its name varies by model type)."""
    for name in ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise KeyError(f"reference: no experts count in the {config.model_type} config")


def unit_parameter_slices(model, component: str, layer_index: int, units):
    """[(parameter name, dim, indices)] of some units (an iterable of ints) of one component."""
    count, width = unit_counts(model.config)[component]
    units = sorted(set(units))
    if len(units) == count:
        return parameter_slices(model, component, layer_index)
    own = torch.tensor([u * width + j for u in units for j in range(width)], dtype=torch.long)
    out = []
    for path, rows in _pieces(model.config, component, layer_index):
        module = model.get_submodule(path)
        conv = _is_conv1d(module)
        if component == "experts":  # expert e: index e on the leading axis of every expert parameter
            out += [(f"{path}.{pname}", 0, own) for pname, _ in module.named_parameters()]
            continue
        if component in ("o", "down") and _is_per_channel(module):  # a sub-norm before o or down
            out += [(f"{path}.{pname}", 0, own) for pname, _ in module.named_parameters(recurse=False)]
            continue
        if component in ("o", "down"):  # input features of the weight only
            out.append((f"{path}.weight", 0 if conv else 1, own))
            continue
        picked = own if rows is None else rows[own]
        for pname, _param in module.named_parameters(recurse=False):
            dim = 1 if (conv and pname == "weight") else 0
            out.append((f"{path}.{pname}", dim, picked))
    return out


def _is_per_channel(module: nn.Module) -> bool:
    """A module whose every parameter is one value per feature (a norm's weight and bias)."""
    params = list(module.parameters(recurse=False))
    return bool(params) and all(p.dim() == 1 for p in params)


def resolve_row_units(specs, n: int, config) -> list[dict]:
    """For each of the row's n real tokens, {(component, layer or None): units or None (whole)}
    for one donor. Units from several specs at one token add up; every unit is the whole."""
    if specs is None:
        specs = []
    if isinstance(specs, GraftSpec):
        specs = [specs]
    num_layers = config.get_text_config().num_hidden_layers
    counts = unit_counts(config)
    plan = [{} for _ in range(n)]
    for spec in specs:
        layers_is_all = isinstance(spec.layers, str) and spec.layers == "all"
        comps = spec.components
        if spec.neurons is not None and comps == "mlp":
            comps = [c for c in ("gate", "up", "down") if c in counts]
        per_layer, model_level = resolve_components(comps, config, layers_is_all)
        keys = {(c, i) for c in per_layer for i in resolve_layers(spec.layers, num_layers)}
        keys |= {(c, None) for c in model_level}
        chosen = next((u for u in (spec.heads, spec.neurons, spec.experts) if u is not None), None)
        chosen = None if chosen is None else ({chosen} if isinstance(chosen, int) else set(chosen))
        for t in resolve_positions(spec.positions, n):
            for key in keys:
                before = plan[t].get(key, set())
                if before is None or chosen is None:
                    plan[t][key] = None
                    continue
                union = before | chosen
                plan[t][key] = None if len(union) == counts[key[0]][0] else union
    return plan


@torch.no_grad()
def graft_units_into(model, donor, grafted: dict) -> None:
    """Copy the donor's weights into `model` for {(component, layer): units or None}."""
    params = dict(model.named_parameters(remove_duplicate=False))
    donor_params = dict(donor.named_parameters(remove_duplicate=False))
    for (component, layer_index), units in grafted.items():
        if units is None:
            pieces = parameter_slices(model, component, layer_index)
        else:
            pieces = unit_parameter_slices(model, component, layer_index, units)
        _copy_slices(params, donor_params, pieces)


@torch.no_grad()
def reference_unit_logits(recipient, donor, ids, specs) -> torch.Tensor:
    """Logits [n, vocab] for one unpadded row, token by token, with head/neuron grafts: at each
    token a fresh copy of the recipient takes exactly the donor's weight slices grafted there."""
    ids = [int(x) for x in ids]
    plan = resolve_row_units(specs, len(ids), recipient.config)
    cache = DynamicCache(config=recipient.config)
    rows = []
    for t, token in enumerate(ids):
        model = untied_copy(recipient)
        graft_units_into(model, donor, plan[t])
        out = model(
            input_ids=torch.tensor([[token]]),
            position_ids=torch.tensor([[t]]),
            attention_mask=torch.ones(1, t + 1, dtype=torch.long),
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        rows.append(out.logits[0, -1])
    return torch.stack(rows)


# ----------------------------------------------------------------------------------------------
# Shaped weight changes, built explicitly: a whole copy of the recipient whose every parameter
# is W_r + scale * shape(W_d - W_r), computed in float64. rank=k keeps the top-k singular
# directions of each matrix (2-D parameter), top=n (int) or top=f (float) its n or round(f * size)
# largest-magnitude entries; vectors take scale * their whole change.
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def shaped_model(recipient, donor, scale: float = 1.0, rank: int | None = None, top=None):
    """A new model: the recipient plus the donor's change, scaled and shaped per parameter."""
    model = copy.deepcopy(recipient)
    donor_params = dict(donor.named_parameters())
    for name, param in model.named_parameters():
        change = donor_params[name].double() - param.double()
        if change.dim() >= 2 and rank is not None:
            u, s, vh = torch.linalg.svd(change, full_matrices=False)
            change = u[:, :rank] @ torch.diag(s[:rank]) @ vh[:rank]
        elif change.dim() >= 2 and top is not None:
            count = max(1, round(top * change.numel())) if isinstance(top, float) else top
            order = torch.argsort(change.abs().flatten(), descending=True)
            kept = torch.zeros(change.numel(), dtype=torch.double)
            kept[order[:count]] = change.flatten()[order[:count]]
            change = kept.view_as(change)
        param.copy_((param.double() + scale * change).to(param.dtype))
    return model
