"""Which rows of each hooked module's output come from which donor, for one chunk of a
`Grafter` call: the bookkeeping done once per chunk so that the hooks only index."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from weightgraft.engine.graft_index import GraftIndex
from weightgraft.engine.graft_masks import GraftMasks
from weightgraft.engine.hooks import Splice
from weightgraft.engine.layer_sharing import LayerGroups


def plan_splices(
    chunk: GraftMasks,
    paths: list[str],
    keep: int,
    groups: Sequence[LayerGroups],
    index: GraftIndex,
    num_donors: int,
    partial_columns: Callable[[int, frozenset, str], tuple[torch.Tensor | None, ...]],
) -> dict[str, list[Splice]]:
    """Per hooked module, this chunk's splices: for each donor, the output rows (and columns)
    it replaces. Fused parts that one donor grafts at the same rows merge into one splice.
    A module in a layer that runs on shared rows (`groups`) gets those rows' splices too.

    The bookkeeping happens here, once per chunk, so that the hooks only index: row indices
    are computed once per class of equal masks (usually a handful), not once per module.
    `index`: the Grafter's keys and modules; `partial_columns(key, units, path)`: the columns of
    a head, neuron or expert graft in a module.
    """
    num_keys, targets, key_paths, path_layer = len(index.keys), index.targets, index.key_paths, index.path_layer
    lm_head_path = index.lm_head_path
    batch, seq = chunk.masks.shape[1:]
    found: dict[tuple, torch.Tensor] = {}

    def rows_of(index: int, last: int, layer: int | None = None) -> torch.Tensor:
        """Flat rows grafted by key `index` within the last `last` positions (0: all), among
        the representatives of `layer`'s shared rows when given."""
        key = (chunk.classes[index], last, layer)
        if key not in found:
            mask = chunk.masks[index, :, -last:] if last else chunk.masks[index]
            if layer is not None:
                mask = mask[groups[layer].representatives]
            found[key] = mask.reshape(-1).nonzero().squeeze(-1)
        return found[key]

    plan: dict[str, list[Splice]] = {}
    for path in paths:
        served_keys = targets[path]
        # With logits_to_keep=N the unembedding sees only each row's last N positions.
        tail = keep > 0 and path == lm_head_path
        splices: list[Splice] = []
        for d in range(num_donors):
            served = [(d * num_keys + k, cols) for k, cols in served_keys if chunk.classes[d * num_keys + k] >= 0]
            if not served:
                continue
            if len(served) == len(served_keys) and len({chunk.classes[i] for i, _ in served}) == 1:
                served = [(served[0][0], None)]  # every part at the same rows: the whole output
            for index, cols in served:
                rows = {(batch, seq): rows_of(index, 0)}
                if tail:
                    rows[(batch, keep)] = rows_of(index, keep)
                layer = path_layer[path]
                if layer is not None and layer < len(groups):
                    rows[(len(groups[layer].representatives), seq)] = rows_of(index, 0, layer)
                if any(r.numel() for r in rows.values()):
                    splices.append(Splice(rows, cols, d))
        base = num_donors * num_keys
        for i, (d, k, units) in enumerate(chunk.partials):
            if chunk.classes[base + i] < 0 or path not in key_paths[k]:
                continue
            rows = {(batch, seq): rows_of(base + i, 0)}
            layer = path_layer[path]
            if layer is not None and layer < len(groups):
                rows[(len(groups[layer].representatives), seq)] = rows_of(base + i, 0, layer)
            if any(r.numel() for r in rows.values()):
                out_cols, in_cols, experts = partial_columns(k, units, path)
                splices.append(Splice(rows, out_cols, d, in_cols, experts))
        if splices:
            plan[path] = splices
    return plan
