"""A condition's controls as conditions of their own: random grafts of its size, and its complement.

A condition of one graft with `controls` is followed, at plan time, by `NAME [random 1]` ...
`NAME [random k]` and `NAME [complement]` (the run-config contract). The dimension varied is
`controls.vary`, by default the finest one the graft narrows (heads, then neurons), else layers.

- Random draws of layers, heads or neurons come from the engine's own drawing
  (`engine.controls.draw_sets`) over the same sets, so they are the grafts
  `engine.controls.random_like(graft, grafter, k, seed, vary=...)` draws on the model: as many
  layers, heads or neurons as the graft has, the draws different from each other and from it.
  Positions differ per row: `resolved.DrawnPositions` draws as many positions as the graft
  selects in that row from the row's other positions, seeded by (seed, the example's id).
- The complement is the rest of the graft's own scope along that dimension, everything else kept
  (positions, layers, components, donor and shape): its other heads or neurons of each component,
  its other layers, or the row's other positions. Graft and complement together are the whole
  scope: the complement of one head of O is every other head of O, in the same layers at the
  same positions. (`engine.controls.complement` is wider: the donor everywhere but the graft.)
"""

from __future__ import annotations

from dataclasses import replace

from weightgraft.engine.controls import ControlError, draw_sets
from weightgraft.engine.units import UnitSpec
from weightgraft.experiments.conditions.position_roles import parse_positions
from weightgraft.experiments.conditions.resolved import Condition, DrawnPositions, ResolvedGraft
from weightgraft.experiments.layers import concrete_layers

FFN_UNITS = ("gate", "up", "down")


def with_controls(conditions: list[Condition], num_layers: int, units: dict[str, UnitSpec]) -> list[Condition]:
    """The conditions, each with controls followed by its control conditions.

    num_layers: the recipient's depth; units: how its heads and neurons divide
    (`PlannedModel.unit_specs`). Raises ControlError naming the condition."""
    out = []
    for cond in conditions:
        out.append(cond)
        if cond.controls is not None:
            out += control_conditions(cond, num_layers, units)
    return out


def varied(cond: Condition) -> str:
    """The dimension the controls of `cond` vary."""
    units = cond.grafts[0].units
    return cond.controls.vary or (units[0] if units is not None else "layers")


def control_conditions(cond: Condition, num_layers: int, units: dict[str, UnitSpec]) -> list[Condition]:
    """`NAME [random i]` for each draw, then `NAME [complement]` when asked."""
    spec, vary = cond.controls, varied(cond)
    out = []
    if spec.random:
        for i, drawn in enumerate(random_grafts(cond, vary, num_layers, units), 1):
            meta = {"control": "random", "of": cond.name, "draw": i}
            out.append(_control(cond, f"random {i}", [drawn], meta, f"random draw {i} (seed {spec.seed}) of {vary}"))
    if spec.complement:
        grafts = complement_grafts(cond, vary, num_layers, units)
        out.append(
            _control(cond, "complement", grafts, {"control": "complement", "of": cond.name}, f"the other {vary}")
        )
    return out


def random_grafts(cond: Condition, vary: str, num_layers: int, units: dict[str, UnitSpec]) -> list[ResolvedGraft]:
    """The graft with `vary` redrawn `controls.random` times (see the module docstring)."""
    spec, graft = cond.controls, cond.grafts[0]
    if vary == "positions":
        return [
            replace(graft, positions=DrawnPositions(graft.positions, spec.seed, i)) for i in range(1, spec.random + 1)
        ]
    if vary == "layers":
        current, space = tuple(concrete_layers(graft.layers, num_layers)), list(range(num_layers))
    else:
        counts = _unit_counts(cond, units)
        current, space = tuple(graft.units[1]), list(range(min(counts.values())))
    draws = draw_sets(
        [current],
        [space],
        spec.random,
        spec.seed,
        vary,
        f"condition {cond.name!r}",
        "ask for fewer draws (controls.random) or vary another dimension (controls.vary)",
    )
    return [replace(graft, **{vary: list(drawn[0])}) for drawn in draws]


def complement_grafts(cond: Condition, vary: str, num_layers: int, units: dict[str, UnitSpec]) -> list[ResolvedGraft]:
    """The rest of the graft's scope along `vary` (see the module docstring)."""
    graft = cond.grafts[0]
    if vary == "positions":
        return [replace(graft, positions=parse_positions(f"({graft.positions.text})^C"))]
    if vary == "layers":
        chosen = concrete_layers(graft.layers, num_layers)
        others = [layer for layer in range(num_layers) if layer not in chosen]
        if not others:
            raise ControlError(f"condition {cond.name!r} grafts every layer, so its complement in layers is empty")
        return [replace(graft, layers=others)]
    by_count: dict[int, list[str]] = {}
    for comp, count in _unit_counts(cond, units).items():
        by_count.setdefault(count, []).append(comp)
    out = []
    for count, comps in by_count.items():
        others = [u for u in range(count) if u not in graft.units[1]]
        if others:
            out.append(replace(graft, components=comps, **{vary: others}))
    if not out:
        raise ControlError(f"condition {cond.name!r} grafts every one of its {vary}, so its complement is empty")
    return out


def _unit_counts(cond: Condition, units: dict[str, UnitSpec]) -> dict[str, int]:
    """How many heads or neurons each component of the graft has on the model."""
    names = cond.grafts[0].components
    comps = [c for n in names for c in (FFN_UNITS if n == "mlp" else (n,)) if c in units]
    if not comps:
        raise ControlError(
            f"condition {cond.name!r}: the model's config does not say how its components divide "
            "into heads or neurons (no num_attention_heads); vary layers or positions instead"
        )
    return {c: units[c].count for c in comps}


def _control(cond: Condition, label: str, grafts: list[ResolvedGraft], extra: dict, what: str) -> Condition:
    return Condition(
        name=f"{cond.name} [{label}]",
        recipient=cond.recipient,
        donor=cond.donor,
        method=cond.method,
        grafts=grafts,
        description=f"control of {cond.name!r}: {what}",
        meta=dict(cond.meta, **extra),
        fidelity=cond.fidelity,
    )
