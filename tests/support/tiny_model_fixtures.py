"""Tiny randomly initialised causal LMs of every shipped architecture, for the engine tests.

Real checkpoints are not available offline, and tiny models keep the suite fast. Fresh HF models
start their norms at 1 (or 0 for Gemma-style `1 + w` norms) and their biases at 0, which would
make a wrong norm or bias graft invisible, so every parameter gets extra Gaussian noise here.
"""

from __future__ import annotations

import torch
import transformers as hf

# Settings shared by every tiny config: no BOS/EOS inside the vocabulary (generation never stops
# early, so lengths are exact), padding id 0, eager attention for determinism.
_COMMON = dict(vocab_size=151, bos_token_id=None, eos_token_id=None, pad_token_id=0)

# Noise added to every parameter after the usual init (see module docstring).
_NOISE_STD = 0.1
_INIT_STD = 0.1


def _llama_like(config_class, **extra):
    kwargs = dict(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=_INIT_STD,
        **_COMMON,
    )
    kwargs.update(extra)
    return config_class(**kwargs)


def _config(arch: str):
    if arch == "gpt2":
        return hf.GPT2Config(n_embd=32, n_layer=3, n_head=4, n_positions=64, initializer_range=_INIT_STD, **_COMMON)
    if arch == "gpt2_untied":
        return hf.GPT2Config(
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=64,
            initializer_range=_INIT_STD,
            tie_word_embeddings=False,
            **_COMMON,
        )
    if arch == "gpt_neox":  # Pythia-like: partial rotary, parallel residual
        return hf.GPTNeoXConfig(
            hidden_size=64,
            intermediate_size=96,
            num_hidden_layers=4,
            num_attention_heads=4,
            rotary_pct=0.25,
            use_parallel_residual=True,
            max_position_embeddings=128,
            initializer_range=_INIT_STD,
            **_COMMON,
        )
    if arch == "gpt_neox_serial":
        return hf.GPTNeoXConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            rotary_pct=0.5,
            use_parallel_residual=False,
            max_position_embeddings=128,
            initializer_range=_INIT_STD,
            **_COMMON,
        )
    if arch == "llama":
        return _llama_like(hf.LlamaConfig)
    if arch == "llama_tied":
        return _llama_like(hf.LlamaConfig, num_hidden_layers=2, tie_word_embeddings=True)
    if arch == "gemma":
        return _llama_like(hf.GemmaConfig, head_dim=8, num_hidden_layers=2)
    if arch == "gemma2":  # small sliding window so that it matters on short prompts
        return _llama_like(hf.Gemma2Config, head_dim=8, num_hidden_layers=2, sliding_window=5, query_pre_attn_scalar=8)
    if arch == "gemma3_text":
        return _llama_like(
            hf.Gemma3TextConfig,
            head_dim=8,
            num_hidden_layers=3,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            query_pre_attn_scalar=8,
        )
    if arch == "qwen2":
        return _llama_like(hf.Qwen2Config, num_hidden_layers=2)
    if arch == "qwen3":
        return _llama_like(hf.Qwen3Config, head_dim=8, num_hidden_layers=2)
    if arch == "mistral":
        return _llama_like(hf.MistralConfig, num_hidden_layers=2, sliding_window=6)
    if arch == "olmo2":
        return _llama_like(hf.Olmo2Config, num_hidden_layers=2)
    if arch == "phi3":
        return _llama_like(hf.Phi3Config, num_hidden_layers=2)
    if arch in MOE_ARCHS:
        return _moe_config(arch)
    raise KeyError(f"unknown tiny architecture {arch!r}; known: {ARCHS + MOE_ARCHS}")


def _moe_config(arch: str):
    """Mixture-of-experts: 3 layers, 4 experts, 2 chosen per token, every layer sparse."""
    moe = dict(num_hidden_layers=3, num_experts_per_tok=2)
    if arch == "mixtral":
        return _llama_like(hf.MixtralConfig, num_local_experts=4, intermediate_size=24, **moe)
    sparse = dict(num_experts=4, moe_intermediate_size=24, decoder_sparse_step=1, mlp_only_layers=[], **moe)
    if arch == "olmoe":
        return _llama_like(hf.OlmoeConfig, num_experts=4, intermediate_size=24, num_key_value_heads=4, **moe)
    if arch == "qwen3_moe":
        return _llama_like(hf.Qwen3MoeConfig, head_dim=8, **sparse)
    return _llama_like(hf.Qwen2MoeConfig, shared_expert_intermediate_size=32, **sparse)


# Every variant; `model_type_of` maps a variant to the HF model_type (the adapter's key).
ARCHS = [
    "gpt2",
    "gpt2_untied",
    "gpt_neox",
    "gpt_neox_serial",
    "llama",
    "llama_tied",
    "gemma",
    "gemma2",
    "gemma3_text",
    "qwen2",
    "qwen3",
    "mistral",
    "olmo2",
    "phi3",
]
# Mixture-of-experts variants, apart from ARCHS (which dozens of dense-model tests parametrize over).
MOE_ARCHS = ["mixtral", "olmoe", "qwen3_moe", "qwen2_moe"]
TIED_ARCHS = ["gpt2", "llama_tied", "gemma", "gemma2", "gemma3_text"]


def make_config(arch: str, **overrides):
    """The tiny config of `arch`, with any field replaced by `overrides` (e.g. vocab_size=61)."""
    config = _config(arch)
    for name, value in overrides.items():
        setattr(config, name, value)
    config._attn_implementation = "eager"
    return config


def model_type_of(arch: str) -> str:
    return make_config(arch).model_type


def make_model(arch: str, seed: int, **overrides):
    """A tiny model of `arch` whose every parameter (norms and biases included) is random;
    `overrides` replace config fields."""
    config = make_config(arch, **overrides)
    torch.manual_seed(seed)
    model = hf.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    generator = torch.Generator().manual_seed(seed + 7919)
    with torch.no_grad():
        for param in model.parameters():  # tied parameters are listed once: noise added once
            param.add_(torch.randn(param.shape, generator=generator) * _NOISE_STD)
    model.eval()
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    return model


def make_pair(arch: str, seed: int = 0, **overrides):
    """(recipient, donor): same config, different random weights, in eval mode."""
    return make_model(arch, 1000 * seed + 1, **overrides), make_model(arch, 1000 * seed + 2, **overrides)


def num_layers(model) -> int:
    return model.config.get_text_config().num_hidden_layers


def tiny_llama(vocab: int, seed: int, max_positions: int = 64):
    """A 2-layer Llama of width 32 over a tokenizer's own vocabulary (BOS 1, padding 0, no EOS),
    seeded, in eval mode with eager attention: for tests that bring their own tokenizer."""
    config = hf.LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=None,
    )
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return hf.LlamaForCausalLM(config).eval()
