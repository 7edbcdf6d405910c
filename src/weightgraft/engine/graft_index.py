"""The Grafter's tables, built once from its adapter: every (layer, component) key a graft can
name, the modules each key is computed by, and which layer each hooked module is in. The
planning of a chunk's splices (`splice_plan.plan_splices`) reads them from here."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from weightgraft.adapters.base import Adapter, Part, chain_of, module_path
from weightgraft.engine.graft import Key

# For each hooked module path: the keys it serves, with their output columns for fused parts.
Targets = dict[str, list[tuple[int, torch.Tensor | None]]]


def module_targets(
    adapter: Adapter, keys: list[tuple[int | None, str]], config, device: torch.device
) -> tuple[Targets, dict[int, tuple[str, torch.Tensor | None]], dict[int, tuple[str, ...]]]:
    """For each module to hook, the keys it serves with their output columns for fused parts;
    for each key, its output's module and columns (a chain's last) and all its modules' paths
    (a chain is served by each of its modules, in data-flow order)."""
    targets: Targets = {}
    key_target: dict[int, tuple[str, torch.Tensor | None]] = {}
    key_paths: dict[int, tuple[str, ...]] = {}
    splits = {path: rule(config) for path, rule in adapter.splits.items()}
    for index, (layer, comp) in enumerate(keys):
        if layer is None:
            served = [(path, None) for path in chain_of(adapter.model_level[comp])]
        else:
            served = [
                (
                    f"{adapter.layers}.{layer}.{module_path(ref)}",
                    splits[ref.module][ref.part].to(device) if isinstance(ref, Part) else None,
                )
                for ref in chain_of(adapter.per_layer[comp])
            ]
        for path, columns in served:
            targets.setdefault(path, []).append((index, columns))
        key_target[index], key_paths[index] = served[-1], tuple(path for path, _ in served)
    return targets, key_target, key_paths


@dataclass(frozen=True)
class GraftIndex:
    """keys: every (layer, component) in a stable order (model-level first), a graft mask's rows.
    key_index: key -> its row. targets: each hooked module -> the keys it serves (with their
    output columns for fused parts). key_target: each key -> its output's module and columns (a
    chain's last). key_paths: each key -> all its modules, in data-flow order. path_layer: each
    hooked module -> its layer (None: model-level). lm_head_path: the unembedding's module ("" for
    none): with logits_to_keep it sees only the last positions."""

    keys: list[Key]
    key_index: dict[Key, int]
    targets: Targets
    key_target: dict[int, tuple[str, torch.Tensor | None]]
    key_paths: dict[int, tuple[str, ...]]
    path_layer: dict[str, int | None]
    lm_head_path: str

    @classmethod
    def build(cls, adapter: Adapter, num_layers: int, config, device: torch.device) -> GraftIndex:
        keys: list[Key] = [(None, c) for c in adapter.model_level]
        keys += [(layer, c) for layer in range(num_layers) for c in adapter.per_layer]
        targets, key_target, key_paths = module_targets(adapter, keys, config, device)
        path_layer = {path: keys[served[0][0]][0] for path, served in targets.items()}
        return cls(
            keys,
            {key: i for i, key in enumerate(keys)},
            targets,
            key_target,
            key_paths,
            path_layer,
            adapter.model_level.get("lm_head", ""),
        )
