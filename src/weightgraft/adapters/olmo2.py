"""OLMo 2: norms on the outputs of attention and MLP (no pre-norms), and q/k norms."""

from weightgraft.adapters.base import Adapter, register_adapter
from weightgraft.adapters.llama import LLAMA_BLOCK, LLAMA_MODEL

OLMO2_BLOCK = {name: path for name, path in LLAMA_BLOCK.items() if name not in ("ln1", "ln2")}

OLMO2 = register_adapter(
    Adapter(
        model_types=("olmo2",),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer={
            **OLMO2_BLOCK,
            "q_norm": "self_attn.q_norm",
            "k_norm": "self_attn.k_norm",
            "post_attn_norm": "post_attention_layernorm",
            "post_mlp_norm": "post_feedforward_layernorm",
        },
        attn_module="self_attn",
        mlp_module="mlp",
    )
)
