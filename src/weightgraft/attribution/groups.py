"""The groups `localize` searches over: a (role, layer, component) of the paper's roles, or at a
finer grain one head or neuron of a component (labelled `o#3`), ranked by their attribution
summed over each role's positions and averaged over prompts."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from weightgraft.attribution.attribute import PAPER_ROLES, Attribution

# A group: (role, layer or None for a model-level component, component).
Group = tuple[str, "int | None", str]


def unit_label(component: str, unit: int) -> str:
    """The group label of one head or neuron: `o#3`."""
    return f"{component}#{unit}"


def parse_label(label: str) -> tuple[str, int | None]:
    """(component, unit or None) of a group's component label."""
    comp, _, unit = label.partition("#")
    return comp, (int(unit) if unit else None)


def rank_groups(attributions: list[Attribution], examples: Sequence) -> tuple[list[Group], list[float]]:
    """Mean over prompts of each group's attribution summed over the role's positions (`examples`:
    the `localize.RoleExample`s, in the attributions' order)."""
    first = attributions[0]
    num_layers, comps, model_comps = first.cells.shape[2], first.layer_components, first.model_components
    layer_total = torch.zeros(len(PAPER_ROLES), num_layers, len(comps), dtype=torch.float64)
    model_total = torch.zeros(len(PAPER_ROLES), len(model_comps), dtype=torch.float64)
    present = torch.zeros(len(PAPER_ROLES), dtype=torch.bool)
    index = 0
    for attr in attributions:
        for b, length in enumerate(attr.lengths):
            example = examples[index]
            index += 1
            onehot = torch.zeros(len(PAPER_ROLES), length, dtype=torch.float64)
            for r, role in enumerate(PAPER_ROLES):
                onehot[r, example.roles.get(role, [])] = 1.0
            present |= onehot.sum(1) > 0
            layer_total += torch.einsum("rp,plc->rlc", onehot, attr.cells[b, :length].double())
            model_total += onehot @ attr.model_level[b, :length].double()
    # Components split into units: role x layer x unit totals, in place of the component's.
    unit_total: dict[str, torch.Tensor] = {}
    index = 0
    for attr in attributions:
        for b, length in enumerate(attr.lengths):
            example = examples[index]
            index += 1
            for comp, values in attr.units.items():
                onehot = torch.zeros(len(PAPER_ROLES), length, dtype=torch.float64)
                for r, role in enumerate(PAPER_ROLES):
                    onehot[r, example.roles.get(role, [])] = 1.0
                add = torch.einsum("rp,plu->rlu", onehot, values[b, :length].double())
                unit_total[comp] = unit_total[comp] + add if comp in unit_total else add
    scored: list[tuple[float, Group]] = []
    n = len(examples)
    for r, role in enumerate(PAPER_ROLES):
        if not present[r]:
            continue
        scored += [(float(model_total[r, c]) / n, (role, None, comp)) for c, comp in enumerate(model_comps)]
        for layer in range(num_layers):
            for c, comp in enumerate(comps):
                if comp not in unit_total:
                    scored.append((float(layer_total[r, layer, c]) / n, (role, layer, comp)))
                    continue
                totals = unit_total[comp][r, layer]
                scored += [(float(totals[u]) / n, (role, layer, unit_label(comp, u))) for u in range(len(totals))]
    scored.sort(key=lambda item: -item[0])  # stable: ties keep role, layer, component order
    return [g for _, g in scored], [s for s, _ in scored]
