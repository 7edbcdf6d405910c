"""GPT-2 (every size): learned position embeddings and a fused Conv1D c_attn laid out q|k|v."""

from transformers import PretrainedConfig

from weightgraft.adapters.base import Adapter, Part, contiguous_split, register_adapter


def _c_attn(config: PretrainedConfig):
    d = config.hidden_size
    return contiguous_split({"q": d, "k": d, "v": d})


GPT2 = register_adapter(
    Adapter(
        model_types=("gpt2",),
        layers="transformer.h",
        model_level={
            "embed": "transformer.wte",
            "pos_embed": "transformer.wpe",
            "ln_final": "transformer.ln_f",
            "lm_head": "lm_head",
        },
        per_layer={
            "q": Part("attn.c_attn", "q"),
            "k": Part("attn.c_attn", "k"),
            "v": Part("attn.c_attn", "v"),
            "o": "attn.c_proj",
            "up": "mlp.c_fc",
            "down": "mlp.c_proj",
            "ln1": "ln_1",
            "ln2": "ln_2",
        },
        attn_module="attn",
        mlp_module="mlp",
        splits={"attn.c_attn": _c_attn},
    )
)
