"""Decoding for `Grafter.generate`: its settings checked before any work, the end-of-sequence
ids, the next token (greedy, or sampled with temperature, top-k and top-p), and the name a
model's forward takes its KV cache by."""

from __future__ import annotations

import inspect

import torch
from torch import nn


def eos_id_set(eos) -> set[int]:
    """The end-of-sequence ids as a set: a config gives none, one id or a list."""
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}


def check_generation_settings(max_new_tokens, do_sample, temperature, top_k, top_p, generated) -> None:
    """Refuse settings that would fail later or mean nothing, before any work is done."""
    if generated not in ("none", "last"):
        raise ValueError(f"generated must be 'none' or 'last', not {generated!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an int >= 0, not {max_new_tokens!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k <= 0):
        raise ValueError(f"top_k must be a positive int (or None for no top-k filter), not {top_k!r}")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] (or None for no nucleus filter), not {top_p!r}")
    if do_sample and not temperature > 0:
        raise ValueError(
            f"temperature must be > 0 when sampling, not {temperature!r}; use do_sample=False for greedy decoding"
        )


def next_token(logits: torch.Tensor, do_sample: bool, temperature: float, top_k, top_p, generator) -> torch.Tensor:
    """Each row's next token from its last logits [batch, vocab]."""
    if not do_sample:
        return logits.argmax(-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cumulative - sorted_logits.softmax(-1) >= top_p  # keep the token that crosses top_p
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def cache_argument(model: nn.Module) -> str:
    """The name a model's forward takes its KV cache by: transformers 5.x renamed
    `past_key_values` to `cache` (and warns on the old name) at a minor release, and we support both."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
