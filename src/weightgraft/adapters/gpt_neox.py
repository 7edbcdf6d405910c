"""GPT-NeoX / Pythia: query_key_value is interleaved per head, [q_h k_h v_h] for each head h."""

from transformers import PretrainedConfig

from weightgraft.adapters.base import Adapter, Part, per_head_interleaved_split, register_adapter


def _query_key_value(config: PretrainedConfig):
    heads = config.num_attention_heads
    return per_head_interleaved_split(("q", "k", "v"), heads, config.hidden_size // heads)


GPT_NEOX = register_adapter(
    Adapter(
        model_types=("gpt_neox",),
        layers="gpt_neox.layers",
        model_level={
            "embed": "gpt_neox.embed_in",
            "ln_final": "gpt_neox.final_layer_norm",
            "lm_head": "lm_head",
        },
        per_layer={
            "q": Part("attention.query_key_value", "q"),
            "k": Part("attention.query_key_value", "k"),
            "v": Part("attention.query_key_value", "v"),
            "o": "attention.dense",
            "up": "mlp.dense_h_to_4h",
            "down": "mlp.dense_4h_to_h",
            "ln1": "input_layernorm",
            "ln2": "post_attention_layernorm",
        },
        attn_module="attention",
        mlp_module="mlp",
        splits={"attention.query_key_value": _query_key_value},
    )
)
