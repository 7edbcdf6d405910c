"""Phi-3: fused q|k|v (grouped-query sizes) and fused gate|up."""

from transformers import PretrainedConfig

from weightgraft.adapters.base import Adapter, Part, contiguous_split, register_adapter
from weightgraft.adapters.llama import LLAMA_MODEL


def _qkv(config: PretrainedConfig):
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_heads = config.num_key_value_heads or config.num_attention_heads
    return contiguous_split(
        {"q": config.num_attention_heads * head_dim, "k": kv_heads * head_dim, "v": kv_heads * head_dim}
    )


def _gate_up(config: PretrainedConfig):
    return contiguous_split({"gate": config.intermediate_size, "up": config.intermediate_size})


PHI3 = register_adapter(
    Adapter(
        model_types=("phi3",),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer={
            "q": Part("self_attn.qkv_proj", "q"),
            "k": Part("self_attn.qkv_proj", "k"),
            "v": Part("self_attn.qkv_proj", "v"),
            "o": "self_attn.o_proj",
            "gate": Part("mlp.gate_up_proj", "gate"),
            "up": Part("mlp.gate_up_proj", "up"),
            "down": "mlp.down_proj",
            "ln1": "input_layernorm",
            "ln2": "post_attention_layernorm",
        },
        attn_module="self_attn",
        mlp_module="mlp",
        splits={"self_attn.qkv_proj": _qkv, "mlp.gate_up_proj": _gate_up},
    )
)
