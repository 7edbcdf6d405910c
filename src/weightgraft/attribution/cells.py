"""The cells of a grafter: which module serves which (layer, component), and with which columns.

A cell is one token position x one (layer, component) key of the engine. Attribution reads the
engine's own resolved tables (read-only), so that a cell here is exactly what a `Graft` of one
position, one layer and one component computes with the donor's weights there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from weightgraft.adapters.base import Part, chain_of, module_path


@dataclass(frozen=True)
class ModuleTarget:
    """One hooked module: its path, the keys it serves (index into `grafter.keys`, output columns
    or None for all), and the axis of its output that runs along the sequence."""

    path: str
    keys: tuple[tuple[int, torch.Tensor | None], ...]
    seq_dim: int
    form: str = "rows"  # how the engine calls it on rows (adapters.base.CALL_FORMS)


@dataclass(frozen=True)
class CellLayout:
    """How the engine's keys map onto the attribution tensors' axes."""

    num_layers: int
    layer_components: tuple[str, ...]  # the component axis of the per-layer tensor
    model_components: tuple[str, ...]  # the component axis of the model-level tensor
    keys: tuple[tuple[int | None, str], ...]  # the engine's keys, in its order
    targets: tuple[ModuleTarget, ...]

    def slot(self, key_index: int) -> tuple[int | None, int]:
        """(layer or None, index on the matching component axis) of an engine key."""
        layer, comp = self.keys[key_index]
        if layer is None:
            return None, self.model_components.index(comp)
        return layer, self.layer_components.index(comp)


def cell_layout(grafter) -> CellLayout:
    """The grafter's keys and module targets (fused parts with their output columns)."""
    adapter = grafter.adapter
    keys = tuple(grafter.keys)
    layer_components = tuple(c for c in adapter.components if c in adapter.per_layer)
    model_components = tuple(c for c in adapter.components if c in adapter.model_level)
    resolved = getattr(grafter, "_targets", None)
    if resolved is None:
        resolved = _resolve_targets(grafter)
    seq_dims = getattr(grafter, "_seq_dims", {})
    forms = getattr(grafter, "_call_forms", {})
    targets = tuple(
        ModuleTarget(
            path, tuple((int(i), cols) for i, cols in served), int(seq_dims.get(path, 1)), forms.get(path, "rows")
        )
        for path, served in resolved.items()
    )
    return CellLayout(grafter.num_layers, layer_components, model_components, keys, targets)


def _resolve_targets(grafter) -> dict[str, list[tuple[int, torch.Tensor | None]]]:
    """The same table the engine builds, for a grafter that does not expose one."""
    adapter, config = grafter.adapter, grafter.recipient.config
    splits = {path: rule(config) for path, rule in adapter.splits.items()}
    targets: dict[str, list[tuple[int, torch.Tensor | None]]] = {}
    for index, (layer, comp) in enumerate(grafter.keys):
        if layer is None:
            for path in chain_of(adapter.model_level[comp]):
                targets.setdefault(path, []).append((index, None))
            continue
        for ref in chain_of(adapter.per_layer[comp]):  # a chain: each of its modules
            columns = splits[ref.module][ref.part] if isinstance(ref, Part) else None
            targets.setdefault(f"{adapter.layers}.{layer}.{module_path(ref)}", []).append((index, columns))
    return targets


def donor_source(grafter, donor: str | None = None):
    """The grafter's donor (a `weightgraft.donors.DonorSource`) whose module outputs a cell's
    graft splices in: `donor` names one of several donors; None means the only one."""
    donors = grafter.donors
    if donor is None:
        if len(donors) > 1:
            raise ValueError(
                f"this grafter has several donors {sorted(donors)}; attribute one at a time with donor=NAME"
            )
        return next(iter(donors.values()))
    if donor not in donors:
        raise ValueError(f"unknown donor {donor!r}; this grafter has {sorted(donors)}")
    return donors[donor]


def donor_name(grafter, donor: str | None = None) -> str:
    """The name a `Graft(..., donor=...)` uses for the donor `donor_source` picks."""
    donor_source(grafter, donor)
    return donor if donor is not None else next(iter(grafter.donors))
