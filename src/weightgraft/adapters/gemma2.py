"""Gemma 2 and Gemma 3 (text): a norm before and after both the attention and the MLP."""

from weightgraft.adapters.base import Adapter, register_adapter
from weightgraft.adapters.llama import LLAMA_BLOCK, LLAMA_MODEL

GEMMA2_BLOCK = {
    **LLAMA_BLOCK,
    "ln1": "input_layernorm",
    "post_attn_norm": "post_attention_layernorm",  # applied to the attention's output
    "ln2": "pre_feedforward_layernorm",
    "post_mlp_norm": "post_feedforward_layernorm",
}

GEMMA2 = register_adapter(
    Adapter(
        model_types=("gemma2",),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer=GEMMA2_BLOCK,
        attn_module="self_attn",
        mlp_module="mlp",
    )
)

GEMMA3_TEXT = register_adapter(
    Adapter(
        model_types=("gemma3_text",),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer={**GEMMA2_BLOCK, "q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"},
        attn_module="self_attn",
        mlp_module="mlp",
        # Gemma 3 normalises q and k after moving heads first: [batch, heads, seq, head_dim].
        seq_dims={"self_attn.q_norm": 2, "self_attn.k_norm": 2},
    )
)
