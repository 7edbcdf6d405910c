"""Tiny models of types no adapter is registered for, whose inferred adapters need more than rows:
OPT and BioGPT (position embeddings computed from the attention mask, OPT's MLP called on flat
tokens), GraniteMoeShared (a dense shared MLP beside the MoE block) and Llama 4 (experts fed
every token once per expert); and their reference
tables, written from the HF modeling files (opt, biogpt, granitemoeshared, llama4), not read off an
adapter, so that the reference grafter checks the inferred roles as well as the engine.
"""

from __future__ import annotations

import functools

import torch
import transformers as hf

import reference_grafter

NOISE_STD = 0.1  # as tiny_model_fixtures: norms and biases must not all be 1 or 0
KINDS = ("opt", "biogpt", "granitemoeshared", "llama4_text")


def tiny_config(kind: str, **overrides):
    """Width 32, 4 heads, 2 blocks (3 for the MoE model); vocab 151 as the engine tests' prompts."""
    common = dict(vocab_size=151, hidden_size=32, num_attention_heads=4, max_position_embeddings=64)
    if kind == "opt":
        # ffn_dim 4 x width: the reference's neuron count (it reads no ffn_dim); no project_in/out.
        config = hf.OPTConfig(
            **common, num_hidden_layers=2, ffn_dim=128, word_embed_proj_dim=32, do_layer_norm_before=True
        )
    elif kind == "biogpt":
        config = hf.BioGptConfig(**common, num_hidden_layers=2, intermediate_size=128, scale_embedding=True)
    elif kind == "granitemoeshared":
        config = hf.GraniteMoeSharedConfig(
            **common,
            num_hidden_layers=3,
            num_key_value_heads=2,
            intermediate_size=24,
            shared_intermediate_size=40,
            num_local_experts=4,
            num_experts_per_tok=2,
            embedding_multiplier=1.5,
            residual_multiplier=0.7,
            attention_multiplier=0.3,
            logits_scaling=2.0,
            tie_word_embeddings=False,
        )
    elif kind == "llama4_text":
        config = hf.Llama4TextConfig(
            **common,
            num_hidden_layers=3,
            num_key_value_heads=2,
            head_dim=8,
            intermediate_size=24,
            intermediate_size_mlp=48,
            num_local_experts=4,
            num_experts_per_tok=2,
            interleave_moe_layer_step=1,  # every block a MoE block (Scout); step 2 is refused: blocks differ
            tie_word_embeddings=False,
        )
    else:
        raise KeyError(f"unknown kind {kind!r}; known: {KINDS}")
    for name, value in overrides.items():
        setattr(config, name, value)
    config._attn_implementation = "eager"
    return config


def make_model(kind: str, seed: int, **overrides):
    """A tiny model of `kind` whose every parameter (norms, biases, position table) is random."""
    torch.manual_seed(seed)
    model = hf.AutoModelForCausalLM.from_config(tiny_config(kind, **overrides), attn_implementation="eager")
    generator = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * NOISE_STD)
    return model.eval()


@functools.cache
def _models(kind: str):
    return make_model(kind, 11), make_model(kind, 12)


def pair(kind: str):
    """(recipient, donor) of `kind`, with its hand-written reference table registered (again on
    every call: the census registers tables read off adapters under the same model types)."""
    recipient, donor = _models(kind)
    reference_grafter.register_table(recipient.config.model_type, reference_table(recipient.config))
    return recipient, donor


def reference_table(config) -> tuple[dict, dict, str]:
    """(per-layer table, model-level table, block prefix) in the reference grafter's format."""
    kind = config.model_type
    if kind in ("opt", "biogpt"):
        return _learned_positions_table(kind)
    return _moe_table(kind)


def _learned_positions_table(kind: str) -> tuple[dict, dict, str]:
    # OPTDecoderLayer / BioGptDecoderLayer: self_attn_layer_norm -> self_attn (q/k/v/out_proj)
    # -> + ; final_layer_norm -> fc1 -> act -> fc2 -> +
    layer = {
        "q": [("self_attn.q_proj", None)],
        "k": [("self_attn.k_proj", None)],
        "v": [("self_attn.v_proj", None)],
        "o": [("self_attn.out_proj", None)],
        "up": [("fc1", None)],
        "down": [("fc2", None)],
        "ln1": [("self_attn_layer_norm", None)],
        "ln2": [("final_layer_norm", None)],
    }
    base = "model.decoder" if kind == "opt" else "biogpt"
    model = {
        "embed": [(f"{base}.embed_tokens", None)],
        "pos_embed": [(f"{base}.embed_positions", None)],
        "ln_final": [(f"{base}.final_layer_norm" if kind == "opt" else f"{base}.layer_norm", None)],
        "lm_head": [("lm_head" if kind == "opt" else "output_projection", None)],
    }
    return layer, model, f"{base}.layers.{{i}}."


# Each MoE kind's router, experts and shared-expert modules; the rest of its block is Llama's.
# GraniteMoeSharedDecoderLayer: input_layernorm -> self_attn -> + ; post_attention_layernorm ->
#   block_sparse_moe (router, experts) + shared_mlp (input_linear, output_linear) -> +
# Llama4TextDecoderLayer: input_layernorm -> self_attn -> + ; post_attention_layernorm ->
#   feed_forward (router, experts on the tokens repeated per expert, shared_expert) -> +
MOE_PATHS = {
    "granitemoeshared": ("block_sparse_moe.router", "block_sparse_moe.experts", "shared_mlp"),
    "llama4_text": ("feed_forward.router", "feed_forward.experts", "feed_forward.shared_expert"),
}


def _moe_table(kind: str) -> tuple[dict, dict, str]:
    if kind not in MOE_PATHS:
        raise KeyError(f"no hand-written reference table for {kind!r}")
    router, experts, shared = MOE_PATHS[kind]
    layer = {
        "q": [("self_attn.q_proj", None)],
        "k": [("self_attn.k_proj", None)],
        "v": [("self_attn.v_proj", None)],
        "o": [("self_attn.o_proj", None)],
        "ln1": [("input_layernorm", None)],
        "ln2": [("post_attention_layernorm", None)],
        "router": [(router, None)],
        "experts": [(experts, None)],
        "shared_expert": [(shared, None)],
    }
    model = {
        "embed": [("model.embed_tokens", None)],
        "ln_final": [("model.norm", None)],
        "lm_head": [("lm_head", None)],
    }
    return layer, model, "model.layers.{i}."
