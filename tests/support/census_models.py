"""Tiny random models of every causal-LM type of the installed transformers, and their families.

The architecture census (issue 38) asks, for each `model_type` in transformers' causal-LM auto
mapping, whether weightgraft can graft it. It stands on this module: one deterministic tiny
config per type (2 blocks, width 64, 4 heads, 4 experts of which 2 per token), the model built
from it with every parameter noised (so that a wrong norm or bias graft is visible, as in
`tiny_model_fixtures`), and a family decided by looking at the built model, not at its name.

Field names differ per type (`n_embd`, `d_model`, `num_local_experts`, `n_routed_experts`, ...),
so the settings are matched generically through each config's dataclass fields and its
`attribute_map`; the few types that need more are in `_OVERRIDES`, each with its reason.
Self-contained: imports only torch and transformers.
"""

from __future__ import annotations

import copy
import dataclasses
import re

import torch
import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
from transformers.pytorch_utils import Conv1D

FAMILIES = ("dense", "moe", "hybrid", "encoder", "multimodal", "unbuildable")
VOCAB = 256
LAYERS = 2
MAX_PARAMETERS = 3_000_000  # a tiny model is far below; more means a size setting was missed
RESERVED_IDS = 16  # the top ids of the vocabulary: special tokens (image, audio, ...) the probe never draws
NOISE_STD = 0.1  # as tiny_model_fixtures: norms and biases must not all be 1 or 0

# Each tiny setting and the field names types give it (the first present one(s) are set; every
# listed name that the config has gets the value, aliases resolved through `attribute_map`).
_SIZES: dict[str, tuple[tuple[str, ...], object]] = {
    "width": (("hidden_size", "n_embd", "d_model", "dim", "embed_dim", "n_embed", "model_dim"), 64),
    "layers": (("num_hidden_layers", "n_layer", "n_layers", "num_layers", "decoder_layers", "encoder_layers"), LAYERS),
    "heads": (
        (
            "num_attention_heads",
            "n_head",
            "n_heads",
            "num_heads",
            "decoder_attention_heads",
            "encoder_attention_heads",
            "swa_num_attention_heads",
        ),
        4,
    ),
    "kv_heads": (
        ("num_key_value_heads", "num_kv_heads", "n_kv_heads", "multi_query_group_num", "swa_num_key_value_heads"),
        2,
    ),
    "head_dim": (("head_dim", "kv_channels", "dim_head", "attention_head_size", "swa_head_dim", "mamba_head_dim"), 16),
    "ffn": (
        (
            "intermediate_size",
            "n_inner",
            "ffn_dim",
            "decoder_ffn_dim",
            "encoder_ffn_dim",
            "ffn_hidden_size",
            "d_ff",
            "dff",
            "dim_ff",
            "intermediate_size_mlp",
            "dense_intermediate_size",
            "prefix_dense_intermediate_size",
        ),
        128,
    ),
    "expert_ffn": (
        (
            "moe_intermediate_size",
            "expert_ffn_hidden_size",
            "shared_expert_intermediate_size",
            "shared_experts_intermediate_size",
            "shared_intermediate_size",
        ),
        32,
    ),
    "experts": (("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts", "n_experts"), 4),
    "top_k": (
        ("num_experts_per_tok", "moe_k", "moe_topk", "top_k_experts", "num_experts_per_token", "top_k", "moe_top_k"),
        2,
    ),
    "rope_head_dim": (("qk_rope_head_dim", "rotary_dim", "index_head_dim"), 8),  # partial rotary: half a head
    "nope_head_dim": (("qk_nope_head_dim",), 8),
    "value_head_dim": (("v_head_dim", "linear_key_head_dim", "linear_value_head_dim", "linear_head_dim"), 16),
    "latent_rank": (("kv_lora_rank", "o_lora_rank", "laurel_rank"), 32),
    "other_heads": (("index_n_heads", "linear_num_key_heads", "linear_num_value_heads", "linear_num_heads"), 4),
    "ssm_sizes": (("mamba_d_head", "mamba_d_state", "state_size"), 16),
    "expert_groups": (("n_group", "num_expert_group", "topk_group"), 1),  # grouped routing: one group
    "ssm_heads": (("mamba_n_heads", "mamba_num_heads"), 4),  # heads x head size = expand x width
    "ssm_expand": (("expand", "mamba_expand"), 1),
    "ssm_groups": (("n_groups", "mamba_n_groups"), 1),
    "vocab": (
        (
            "vocab_size",
            "vocab_size_per_layer_input",
            "unpadded_vocab_size",
            "output_vocab_size",
            "shape_vocab_size",
            "pronunciation_vocab_size",
        ),
        VOCAB,
    ),
    "per_layer_width": (("hidden_size_per_layer_input",), 16),
    "positions": (("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len", "model_max_length"), 128),
}

# Every layer the same kind where a plain setting allows it: no dense-first or dense-interleaved
# layers in a mixture-of-experts stack (each field below exists only on MoE configs).
_UNIFORM_LAYERS: dict[str, object] = {
    "first_k_dense_replace": 0,  # DeepSeek-style: the first k layers dense
    "num_dense_layers": 0,  # AFMoE / LFM2-MoE: leading dense layers
    "decoder_sparse_step": 1,  # Qwen-MoE-style: MoE every step-th layer
    "mlp_only_layers": [],  # Qwen-MoE-style: layers forced dense
    "moe_layer_start_index": 0,  # ERNIE 4.5 MoE: MoE from this layer on
    "moe_layer_interval": 1,  # ERNIE 4.5 MoE: every interval-th layer
    "interleave_moe_layer_step": 1,  # Llama 4: MoE every step-th layer
    "expert_layer_period": 1,  # Jamba: MoE every period-th layer
    "expert_layer_offset": 0,
}

# Types needing more than the generic settings: type -> extra config kwargs, with the reason.
_OVERRIDES: dict[str, dict[str, object]] = {
    # DbrxAttention reads attn_config.rope_theta, which DbrxAttentionConfig does not define
    # Dots1 multiplies by n_shared_experts, whose default None crashes the build
    "dots1": {"n_shared_experts": 1},
    # LFM2-MoE indexes layer_types, whose default None crashes the build: one conv, one attention block
    "lfm2_moe": {"layer_types": ["conv", "full_attention"]},
    # LFM2's default pattern puts its first attention block past layer 2: keep one conv block
    "lfm2": {"layer_types": ["conv", "full_attention"]},
    # DBRX clamps q, k, v by clip_qkv, whose default None crashes the forward pass
    "dbrx.attn_config": {"rope_theta": 10000.0, "kv_n_heads": 2, "clip_qkv": 8.0},
    # GPT-Neo's attention_types must cover exactly num_hidden_layers: one global, one local block
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    # Zamba's layer list must have num_hidden_layers entries: one Mamba, one Mamba + shared attention
    "zamba": {"layer_types": ["mamba", "hybrid"]},
    "zamba2": {"layer_types": ["mamba", "hybrid"]},
    # ZAYA supports one expert per token only
    "zaya": {"num_experts_per_tok": 1},
    # Gemma 3n shares the KV cache of its last 15 layers by default: none of 2
    "gemma3n_text": {"num_kv_shared_layers": 0},
    "gemma3n.text_config": {"num_kv_shared_layers": 0},
    # LongCat-Flash's rotary embedding is head_dim wide: it must equal qk_rope_head_dim
    # and its 256 zero-computation (identity) experts by default: 2 beside the 4 real ones
    "longcat_flash": {"head_dim": 8, "zero_expert_num": 2},
}


def census_types() -> list[str]:
    """Every model_type of transformers' causal-LM auto mapping, sorted."""
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _fields(config_class) -> dict[str, dataclasses.Field]:
    """The config class's own fields (its dataclass fields), by name."""
    return {field.name: field for field in dataclasses.fields(config_class)}


def _default(field: dataclasses.Field):
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def _tiny_kwargs(config_class) -> dict[str, object]:
    """The tiny settings this config class takes, under its own field names."""
    fields = _fields(config_class)
    aliases = getattr(config_class, "attribute_map", {}) or {}
    kwargs: dict[str, object] = {}
    reserved = iter(range(VOCAB - 1, VOCAB - 1 - RESERVED_IDS, -1))
    for names, value in _SIZES.values():
        for name in names:
            for real in (name, aliases.get(name)):  # a field may be named by the alias or its target
                if real in fields:
                    kwargs[real] = value
    for name, value in _UNIFORM_LAYERS.items():
        if name in fields:
            kwargs[name] = value
    for name, field in fields.items():
        default = _default(field)
        if re.search(r"dropout|pdrop|layerdrop|dropout_p$", name) and isinstance(default, float):
            kwargs[name] = 0.0  # dropout 0: eval mode alone would do, but training-mode use stays exact
        elif re.search(r"(token_id|token_index)$", name):
            kwargs[name] = _special_id(default, reserved)  # special ids inside the tiny vocabulary
        elif name == "mamba_d_ssm":
            kwargs[name] = None  # the SSM width follows from expand x width
        elif name == "kv_lora_rank":
            kwargs["num_key_value_heads"] = kwargs.get("num_attention_heads", 4)  # latent attention: keys per head
        elif name == "q_lora_rank" and default is not None:
            kwargs[name] = 32  # a query latent only where the type has one by default
        elif name in ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts"):
            kwargs[name] = min(default, 1) if isinstance(default, int) else default
    return kwargs


def _special_id(default, reserved):
    """`default` where it is inside the tiny vocabulary, else the next reserved id (lists element-wise)."""
    if isinstance(default, list):
        return [_special_id(one, reserved) for one in default]
    if isinstance(default, int) and default >= VOCAB:
        return next(reserved)
    return default


def tiny_config(model_type: str) -> transformers.PretrainedConfig:
    """A deterministic tiny config of `model_type`, eager attention, float32.

    Args:
        model_type: a key of transformers' causal-LM auto mapping (see `census_types`).

    Returns:
        The config: 2 blocks of width 64 (4 heads of 16, 2 key-value heads, FFN 128), vocabulary
        256, 4 experts with 2 per token on MoE types; composite configs shrink every sub-config.

    Raises:
        Whatever transformers raises when the type does not accept these sizes.
    """
    config_class = transformers.CONFIG_MAPPING[model_type]
    kwargs = _tiny_kwargs(config_class)
    sub_names = list(getattr(config_class, "sub_configs", {}) or {})
    defaults = config_class() if sub_names else None  # what each AutoConfig sub-config defaults to
    for name in sub_names:
        sub = getattr(defaults, name, None)
        if isinstance(sub, transformers.PretrainedConfig):
            extra = _OVERRIDES.get(f"{model_type}.{name}", {})
            kwargs[name] = {"model_type": sub.model_type, **_tiny_kwargs(type(sub)), **extra}
    kwargs.update(_OVERRIDES.get(model_type, {}))
    config = config_class(**kwargs)
    kinds = getattr(config, "mlp_layer_types", None)
    if isinstance(kinds, list) and len(set(kinds)) > 1 and "dense" in kinds:
        # a derived per-layer list with dense layers first (e.g. ["dense", "sparse"]): every layer sparse
        sparse = next(kind for kind in kinds if kind != "dense")
        config = config_class(**{**kwargs, "mlp_layer_types": [sparse] * LAYERS})
    for sub in _all_configs(config):
        sub._attn_implementation = "eager"
        _keep_special_ids_inside(sub)
    config.dtype = torch.float32
    return config


def _keep_special_ids_inside(config) -> None:
    """Special ids a config sets in its own __post_init__ (e.g. GLM's list of EOS ids) moved inside the vocabulary."""
    half = RESERVED_IDS // 2  # the lower half of the reserved ids: apart from those the constructor got
    reserved = iter(range(VOCAB - 1 - half, VOCAB - 1 - RESERVED_IDS, -1))
    for name, value in config.to_diff_dict().items():
        if re.search(r"(token_id|token_ids|token_index)$", name):
            inside = _special_id(value, reserved)
            if inside != value:
                setattr(config, name, inside)


def _all_configs(config) -> list:
    """The config and every sub-config in it."""
    found = [config]
    for name in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, name, None)
        if isinstance(sub, transformers.PretrainedConfig):
            found.extend(_all_configs(sub))
    return found


def build_tiny(model_type: str, seed: int = 0) -> torch.nn.Module:
    """The tiny causal LM of `model_type`, every parameter random and noised, in eval mode.

    Args:
        model_type: a key of transformers' causal-LM auto mapping.
        seed: seeds both the initialisation and the extra noise.

    Returns:
        The auto mapping's causal-LM class on `tiny_config(model_type)`.
    """
    config = tiny_config(model_type)
    model_class = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
    with torch.device("meta"):  # sizes first: a setting the type ignored must not fill the memory
        size = sum(param.numel() for param in model_class(config).parameters())
    if size > MAX_PARAMETERS:
        raise ValueError(f"the tiny config still has {size:,} parameters (> {MAX_PARAMETERS:,})")
    torch.manual_seed(seed)
    model = model_class(config).to(torch.float32)
    generator = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for param in model.parameters():  # tied parameters are listed once: noised once
            param.add_(torch.randn(param.shape, generator=generator) * NOISE_STD)
    return model.eval()


def donor_of(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """A deep copy of `model` with independent noise on every parameter: a donor differing everywhere."""
    donor = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed + 104729)
    with torch.no_grad():
        for param in donor.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * NOISE_STD)
    return donor.eval()


def probe_inputs(batch: int = 2, length: int = 7) -> dict[str, torch.Tensor]:
    """input_ids [batch, length] inside the vocabulary and an attention mask whose last row is left-padded."""
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, VOCAB - RESERVED_IDS, (batch, length), generator=generator)
    attention_mask = torch.ones(batch, length, dtype=torch.long)
    attention_mask[-1, :2] = 0
    input_ids[-1, :2] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def logits_of(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's logits on `inputs` (no cache), position ids counted from each row's first real token."""
    position_ids = (inputs["attention_mask"].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        output = model(**inputs, position_ids=position_ids, use_cache=False)
    return output.logits if hasattr(output, "logits") else output[0]


@dataclasses.dataclass(frozen=True)
class CensusEntry:
    """One type's place in the census: its family (one of FAMILIES) and why, in one line."""

    model_type: str
    family: str
    reason: str


# Module class names of token mixers other than softmax attention (SSMs, recurrences, linear
# attention, convolutions), matched case-insensitively inside the decoder blocks.
_MIXER_CLASS = re.compile(
    r"Mamba|SSM|Ssm|Rwkv|RWKV|Recurrent|Rglru|RGLRU|LSTM|Lstm|DeltaNet|DeltaAttention|Kda|KDA|Lightning|"
    r"LinearAttention|ShortConv|Conv|Hyena|Retention|Mixer"
)
_NORM_CLASS = re.compile(r"Norm")
_ATTENTION_CLASS = re.compile(r"attention|attn", re.IGNORECASE)
_CROSS_ATTENTION_NAME = re.compile(r"crossattention|encoder_attn|cross_attn")
_EXPERTS_NAME = re.compile(r"^(local_)?experts$")
_MODALITY_NAME = re.compile(r"vision|audio|image|video|speech|vq")


def _first_line(error: BaseException) -> str:
    """`error` in one line; a validation error's cause (its second line) when the first only names the check."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "")
    return f"{type(error).__name__}: {text}"[:240]


def decoder_blocks(model: torch.nn.Module) -> tuple[str, list[torch.nn.Module]]:
    """(path, blocks) of the model's stack: its largest ModuleList of modules (hybrids mix classes).

    Nemotron-H's list holds one mixer or one MLP per entry, so it is longer than LAYERS.
    """
    best, best_size = ("", []), -1
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) >= LAYERS:
            if isinstance(module[0], (torch.nn.Linear, torch.nn.Embedding)):
                continue
            size = sum(param.numel() for param in module.parameters())
            if size > best_size:
                best, best_size = (path, list(module)), size
    return best


def _modality(model_type: str) -> str | None:
    """The sub-config or field that makes the type a vision/audio wrapper, if any (read off its config class)."""
    config_class = transformers.CONFIG_MAPPING[model_type]
    for name in list(getattr(config_class, "sub_configs", {}) or {}) + list(_fields(config_class)):
        if _MODALITY_NAME.search(name):
            return name
    return None


def _encoder_reason(model_type: str, model: torch.nn.Module) -> str | None:
    """Why `model` is an encoder or encoder-decoder used as a causal LM, or None."""
    defaults = transformers.CONFIG_MAPPING[model_type]()
    if getattr(defaults, "is_encoder_decoder", False) or hasattr(defaults, "encoder_layers"):
        return "an encoder-decoder's decoder (config has encoder_layers / is_encoder_decoder)"
    if getattr(defaults, "is_decoder", True) is False and hasattr(defaults, "type_vocab_size"):
        return "a bidirectional encoder by default (is_decoder=False, token-type embeddings)"
    for path, _ in model.named_modules():
        if _CROSS_ATTENTION_NAME.search(path.rsplit(".", 1)[-1]):
            return f"cross-attention module {path}"
    return None


def _is_causal(model: torch.nn.Module) -> bool:
    """Whether changing the last token leaves every earlier position's logits as they were."""
    inputs = probe_inputs(1)
    inputs["attention_mask"] = torch.ones_like(inputs["attention_mask"])  # no padding in this one row
    changed = {**inputs, "input_ids": inputs["input_ids"].clone()}
    changed["input_ids"][0, -1] = (changed["input_ids"][0, -1] + 1) % (VOCAB - RESERVED_IDS)
    before, after = logits_of(model, inputs), logits_of(model, changed)
    return torch.allclose(before[:, :-1], after[:, :-1], atol=1e-6)


def _mixer_reason(blocks: list[torch.nn.Module]) -> str | None:
    """The first non-attention token mixer in the blocks, or the first block without attention."""
    for index, block in enumerate(blocks):
        has_attention = False
        for path, module in block.named_modules():
            name = type(module).__name__
            linear = isinstance(module, Conv1D)  # GPT-2's Conv1D is a linear layer, not a convolution
            mixer = path and _MIXER_CLASS.search(name) and not _NORM_CLASS.search(name) and not linear
            if isinstance(module, torch.nn.Conv1d) or mixer:
                return f"block {index} mixes tokens with {name} ({path or 'the block'})"
            attribute = path.rsplit(".", 1)[-1]  # LongCat's MLA modules sit in a list named self_attn
            has_attention |= bool(path) and bool(_ATTENTION_CLASS.search(name) or _ATTENTION_CLASS.search(attribute))
        if not has_attention:
            return f"block {index} ({type(block).__name__}) holds no attention module"
    return None


def _experts_reason(blocks: list[torch.nn.Module]) -> str | None:
    """Where the blocks hold a mixture of experts (a module named `experts`), or None."""
    for index, block in enumerate(blocks):
        for path, module in block.named_modules():
            if _EXPERTS_NAME.match(path.rsplit(".", 1)[-1]):
                stacked = [tuple(param.shape) for param in module.parameters(recurse=False) if param.dim() == 3]
                kind = (
                    f"stacked {stacked[0]}" if stacked else f"{type(module).__name__} of {len(list(module.children()))}"
                )
                return f"block {index} {path}: {kind}"
    return None


def classify(model_type: str) -> CensusEntry:
    """The family of `model_type`, decided on its built tiny model and config.

    Args:
        model_type: a key of transformers' causal-LM auto mapping.

    Returns:
        A CensusEntry: "multimodal" (vision/audio sub-configs or fields), "encoder" (an encoder or
        encoder-decoder used as a causal LM, or a non-causal model), "hybrid" (a block mixes tokens
        with something other than softmax attention), "moe" / "dense" (attention in every block,
        experts or not), or "unbuildable" (the tiny model cannot be built or run on a padded batch).
    """
    modality = _modality(model_type)
    if modality:
        return CensusEntry(model_type, "multimodal", f"a vision/audio wrapper (its config has {modality})")
    try:
        model = build_tiny(model_type)
    except Exception as error:  # noqa: BLE001 - the census records every failure, whatever its kind
        return CensusEntry(model_type, "unbuildable", _first_line(error))
    reason = _encoder_reason(model_type, model)
    if reason:
        return CensusEntry(model_type, "encoder", reason)
    try:
        causal = _is_causal(model)
        logits_of(model, probe_inputs())
    except Exception as error:  # noqa: BLE001
        return CensusEntry(model_type, "unbuildable", "forward on a left-padded batch: " + _first_line(error))
    if not causal:
        return CensusEntry(model_type, "encoder", "not causal: the last token changes earlier logits")
    path, blocks = decoder_blocks(model)
    if not blocks:
        return CensusEntry(model_type, "unbuildable", "no stack of decoder blocks found")
    reason = _mixer_reason(blocks)
    if reason:
        return CensusEntry(model_type, "hybrid", reason)
    reason = _experts_reason(blocks)
    if reason:
        return CensusEntry(model_type, "moe", f"{path}: {reason}")
    return CensusEntry(model_type, "dense", f"{path}: attention and a dense FFN in every block")


def census() -> list[CensusEntry]:
    """Every type of `census_types()`, classified."""
    return [classify(model_type) for model_type in census_types()]
