"""Share the layers below a graft: rows that agree on everything a layer sees compute it once.

A layer sweep grafts one band of layers per condition. Below the band, such a row is the same
computation as the rows grafted nowhere there: same tokens, same grafts in every earlier layer.
Prefix sharing (`sharing.py`) cannot see this, because those rows part ways at the first grafted
position; this module shares along the depth instead. For each decoder layer, rows fall into
classes that agree on their tokens, mask and every graft up to and including that layer over the
whole pass; the layer runs on one row per class and its output (and its KV cache) is copied to
the others. Classes only split with depth, so the shared layers are the first few; from the
first layer where every row is on its own, layers run as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn
from transformers.cache_utils import Cache

BEFORE_THE_LAYERS = ("embed", "pos_embed")  # model-level components that act before layer 0


@dataclass
class LayerGroups:
    """One layer's classes: a representative row per class, and each row's class."""

    representatives: torch.Tensor
    row_to_class: torch.Tensor


def plan_layer_groups(
    ids: torch.Tensor,
    mask: torch.Tensor,
    graft_masks: torch.Tensor,
    keys_before: list[int],
    keys_of_layer: list[list[int]],
) -> list[LayerGroups]:
    """Classes for layers 0, 1, ... as long as some rows coincide (an empty list: none do).

    `graft_masks` is [num_masks, batch, seq] over every position the pass's rows have seen (its
    cached prefix included); `keys_before` index the masks of components that act before layer 0,
    `keys_of_layer[l]` those of layer l's components."""
    batch = ids.shape[0]
    if batch < 2:
        return []

    def refine(classes: torch.Tensor, keys: list[int]) -> torch.Tensor:
        columns = graft_masks[keys].permute(1, 0, 2).reshape(batch, -1).long()
        _, refined = torch.unique(torch.cat([classes[:, None], columns], dim=1), dim=0, return_inverse=True)
        return refined

    _, classes = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
    classes = refine(classes, keys_before)
    groups: list[LayerGroups] = []
    rows = torch.arange(batch, device=ids.device)
    for keys in keys_of_layer:
        classes = refine(classes, keys)
        count = int(classes.max()) + 1
        if count == batch:
            break
        representatives = torch.full((count,), batch, device=ids.device).scatter_reduce(0, classes, rows, reduce="amin")
        groups.append(LayerGroups(representatives, classes))
    return groups


class SharedLayers:
    """Runs each decoder layer on its classes' representatives while `groups` says so."""

    def __init__(self, layers: nn.ModuleList):
        self.layers = list(layers)
        self.groups: list[LayerGroups] = []

    @contextmanager
    def installed(self) -> Iterator[SharedLayers]:
        try:
            with wrapped_forwards(self.layers, self._shared):
                yield self
        finally:
            self.groups = []

    def _shared(self, index: int, forward):
        def shared_forward(*args, **kwargs):
            group = self.groups[index] if index < len(self.groups) else None
            if group is None:
                return forward(*args, **kwargs)
            hidden = args[0] if args else kwargs["hidden_states"]
            batch = hidden.shape[0]
            caches = [value for value in (*args, *kwargs.values()) if isinstance(value, Cache)]
            for cache in caches:
                if index < len(cache.layers):
                    cache.layers[index].reorder_cache(group.representatives)
            out = forward(
                *(_take(a, group.representatives, batch) for a in args),
                **{k: _take(v, group.representatives, batch) for k, v in kwargs.items()},
            )
            for cache in caches:
                cache.layers[index].reorder_cache(group.row_to_class)
            return _take(out, group.row_to_class, len(group.representatives))

        return shared_forward


@contextmanager
def wrapped_forwards(layers: list[nn.Module], wrap: Callable[[int, Callable], Callable]) -> Iterator[None]:
    """Within: each layer's `forward` is `wrap(index, forward)`; restored after. A forward set on
    the instance before (accelerate's big-model hooks, another wrapper) stays inside the new one."""
    saved = []
    try:
        for index, layer in enumerate(layers):
            saved.append(layer.__dict__.get("forward"))
            layer.forward = wrap(index, layer.forward)
        yield
    finally:
        for layer, own in zip(layers, saved):
            if own is None:
                del layer.forward
            else:
                layer.forward = own


def _take(value, rows: torch.Tensor, batch: int):
    """`value` with its batch rows picked by `rows`: per-row tensors ([batch, ...], two dims or
    more: hidden states, masks, positions, rotary tables), inside tuples and lists too."""
    if isinstance(value, torch.Tensor):
        if value.dim() >= 2 and value.shape[0] == batch:
            return value.index_select(0, rows.to(value.device))
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(_take(v, rows, batch) for v in value)
    return value
