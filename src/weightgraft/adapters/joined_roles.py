"""Parameterised modules that are not projections but sit on one projection's path, position-wise:
an activation with parameters (Apertus' xIELU reads up_proj's output) or a sub-norm (BitNet's
attn_sub_norm before o_proj, ffn_sub_norm before down_proj). Each joins that projection's
component as a chain (`adapters.base.ComponentRef`), decided by data flow on the probe: a module
that reads a projection's output joins after it; else one whose output a projection reads joins
before it. Grafting the chain computes both with the donor's weights.
"""

from __future__ import annotations

import torch

from weightgraft.adapters.role_types import BlockRoles, Refusal


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return a is not None and b is not None and a.shape == b.shape and torch.equal(a, b)


def find_joins(base: dict, extras: list[str], projections: list[str]) -> dict[str, tuple[list, list]] | None:
    """projection -> (modules joining before it, modules joining after it); None when some extra
    module sits on no projection's path (the caller refuses it in its own words)."""
    joins: dict[str, tuple[list, list]] = {}
    for extra in extras:
        after = [p for p in projections if _same(base[extra].input, base[p].output)]
        before = [p for p in projections if _same(base[extra].output, base[p].input)]
        if len(after) == 1:
            joins.setdefault(after[0], ([], []))[1].append(extra)
        elif len(before) == 1:
            joins.setdefault(before[0], ([], []))[0].append(extra)
        else:
            return None
    return joins


def apply_joins(roles: BlockRoles, joins: dict[str, tuple[list, list]]) -> None:
    """Each joined projection's component becomes the chain [before..., projection, after...]."""
    for comp, entry in list(roles.per_layer.items()):
        if not isinstance(entry, str) or entry not in joins:
            if isinstance(entry, tuple) and entry[0] in joins:
                raise Refusal(f"modules {joins[entry[0]]} sit on fused projection {entry[0]!r}, shared by its parts")
            continue
        before, after = joins[entry]
        roles.per_layer[comp] = [*before, entry, *after]


def head_of(entry: object) -> str:
    """The module whose input a component's chain reads first."""
    first = entry[0] if isinstance(entry, list) else entry
    return first[0] if isinstance(first, tuple) else first
