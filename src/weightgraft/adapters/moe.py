"""Mixture-of-experts decoders of transformers 5: Mixtral, OLMoE, Qwen3-MoE and Qwen2-MoE.

Each layer's MLP is a sparse block (`mlp`) that flattens [batch, seq, hidden] to tokens, routes
them (`mlp.gate`, a top-k router returning logits, scores and indices) and sums the chosen
experts (`mlp.experts`, every expert's weights on the leading axis of 3-D parameters, called as
experts(hidden, top_k_index, top_k_weights)); Qwen2-MoE adds a shared expert scaled by a sigmoid
gate. Router, experts and shared parts see the flat tokens: their call form is "flat".
"""

from weightgraft.adapters.base import Adapter, register_adapter
from weightgraft.adapters.llama import LLAMA_BLOCK, LLAMA_MODEL

ATTENTION = {c: LLAMA_BLOCK[c] for c in ("q", "k", "v", "o", "ln1", "ln2")}
SPARSE_BLOCK = {"router": "mlp.gate", "experts": "mlp.experts"}
SHARED_EXPERT = {"shared_expert": "mlp.shared_expert", "shared_expert_gate": "mlp.shared_expert_gate"}
QK_NORMS = {"q_norm": "self_attn.q_norm", "k_norm": "self_attn.k_norm"}


def _flat(block: dict[str, str]) -> dict[str, str]:
    return dict.fromkeys(block.values(), "flat")


MIXTRAL = register_adapter(
    Adapter(
        model_types=("mixtral",),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer={**ATTENTION, **SPARSE_BLOCK},
        attn_module="self_attn",
        mlp_module="mlp",
        call_forms=_flat(SPARSE_BLOCK),
    )
)

# OLMoE normalises q and k over all heads at once ([batch, seq, heads * head_dim]); Qwen3-MoE per
# head, on [batch, seq, heads, head_dim]: both keep the sequence at dim 1.
OLMOE_QWEN3_MOE = register_adapter(
    Adapter(
        model_types=("olmoe", "qwen3_moe"),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer={**ATTENTION, **QK_NORMS, **SPARSE_BLOCK},
        attn_module="self_attn",
        mlp_module="mlp",
        call_forms=_flat(SPARSE_BLOCK),
    )
)

QWEN2_MOE = register_adapter(
    Adapter(
        model_types=("qwen2_moe",),
        layers="model.layers",
        model_level=LLAMA_MODEL,
        per_layer={**ATTENTION, **SPARSE_BLOCK, **SHARED_EXPERT},
        attn_module="self_attn",
        mlp_module="mlp",
        call_forms=_flat({**SPARSE_BLOCK, **SHARED_EXPERT}),
    )
)
