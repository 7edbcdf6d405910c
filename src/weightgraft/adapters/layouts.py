"""Every way a fused projection may lay its parts along its output, for adapter inference to try.

A fused q/k/v (or k/v, or gate/up) matrix says nothing of its layout: GPT-2 puts the parts one
after another, GPT-NeoX interleaves them per head, Falcon groups query heads with the key-value
head they read. Inference tries each candidate here against the model's behaviour and keeps the
one that passes; this file only enumerates.
"""

from __future__ import annotations

from itertools import permutations

import torch

from weightgraft.adapters.base import contiguous_split, per_head_interleaved_split

Layout = dict[str, torch.Tensor]


def attention_layouts(width: int, heads: int, kv_heads: int, head_dim: int) -> list[Layout]:
    """Candidate layouts of a pre-attention projection `width` wide: a single q, k or v; a fused
    k/v; or a fused q/k/v (contiguous in any order, interleaved per head, or grouped per
    key-value head)."""
    q, kv = heads * head_dim, kv_heads * head_dim
    found: list[Layout] = []
    for part, size in (("q", q), ("k", kv), ("v", kv)):
        if width == size:
            found.append({part: torch.arange(width)})
    if width == 2 * kv:
        found += [contiguous_split({a: kv, b: kv}) for a, b in (("k", "v"), ("v", "k"))]
        found.append(per_head_interleaved_split(("k", "v"), kv_heads, head_dim))
    if width == q + 2 * kv:
        found += [contiguous_split({p: {"q": q}.get(p, kv) for p in order}) for order in permutations("qkv")]
        if heads == kv_heads:
            found += [per_head_interleaved_split(order, heads, head_dim) for order in permutations("qkv")]
        if kv_heads and heads % kv_heads == 0:
            found.append(_grouped_per_kv_head(heads // kv_heads, kv_heads, head_dim))
    return _distinct(found)


def _grouped_per_kv_head(group: int, kv_heads: int, head_dim: int) -> Layout:
    """[q heads of group 0 | k_0 | v_0 | q heads of group 1 | k_1 | v_1 | ...]."""
    stride = (group + 2) * head_dim
    starts = torch.arange(kv_heads)[:, None] * stride
    span = torch.arange(head_dim)[None, :]

    def take(offset: int, count: int) -> torch.Tensor:
        return (starts + offset + torch.arange(count * head_dim)[None, :]).reshape(-1)

    return {
        "q": take(0, group),
        "k": (starts + group * head_dim + span).reshape(-1),
        "v": (starts + (group + 1) * head_dim + span).reshape(-1),
    }


def gate_up_layouts(width: int, inner: int) -> list[Layout]:
    """Candidate layouts of an MLP input projection `width` wide, the MLP being `inner` wide: up
    alone, or gate and up fused (either half first, or interleaved one neuron each)."""
    if width == inner:
        return [{"up": torch.arange(width)}]
    if width != 2 * inner:
        return []
    found = [contiguous_split({a: inner, b: inner}) for a, b in (("gate", "up"), ("up", "gate"))]
    found += [per_head_interleaved_split(order, inner, 1) for order in (("gate", "up"), ("up", "gate"))]
    return _distinct(found)


def latent_kv_layouts(heads: int, k_width: int, v_width: int) -> list[Layout]:
    """Candidate layouts of multi-latent attention's key-value expansion (kv_b_proj): per head a k
    and a v of unequal widths, [k_0 v_0 | k_1 v_1 | ...] in either order, or all k then all v."""
    if k_width <= 0 or v_width <= 0:
        return []
    found = []
    for first, second in (("k", "v"), ("v", "k")):
        widths = {"k": k_width, "v": v_width}
        stride = k_width + v_width
        starts = torch.arange(heads)[:, None] * stride
        found.append(
            {
                first: (starts + torch.arange(widths[first])[None, :]).reshape(-1),
                second: (starts + widths[first] + torch.arange(widths[second])[None, :]).reshape(-1),
            }
        )
        found.append(contiguous_split({first: heads * widths[first], second: heads * widths[second]}))
    return _distinct(found)


def _distinct(layouts: list[Layout]) -> list[Layout]:
    """Drop layouts that give every part the same columns as an earlier one."""
    out, keys = [], set()
    for layout in layouts:
        key = tuple(sorted((part, tuple(cols.tolist())) for part, cols in layout.items()))
        if key not in keys:
            keys.add(key)
            out.append(layout)
    return out
