"""The Llama layout, shared by Llama 3, Mistral, Qwen2, Qwen3 and Gemma (1)."""

from weightgraft.adapters.base import Adapter, register_adapter

LLAMA_BLOCK = {
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
    "ln1": "input_layernorm",
    "ln2": "post_attention_layernorm",  # despite its name, the norm in front of the MLP
}
LLAMA_MODEL = {"embed": "model.embed_tokens", "ln_final": "model.norm", "lm_head": "lm_head"}

LLAMA = register_adapter(
    Adapter(
        model_types=("llama", "mistral", "qwen2", "gemma"),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer=LLAMA_BLOCK,
        attn_module="self_attn",
        mlp_module="mlp",
    )
)

QWEN3 = register_adapter(
    Adapter(
        model_types=("qwen3",),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer={**LLAMA_BLOCK, "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"},
        attn_module="self_attn",
        mlp_module="mlp",
    )
)
