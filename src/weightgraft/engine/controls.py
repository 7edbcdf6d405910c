"""Controls for a graft: random grafts of the same size, and the necessity complement.

A finer claim ("heads 3 and 5 of O at the last token carry recall") needs its baselines: the same
number of heads drawn at random (is any two heads enough?), and the donor everywhere *except*
those heads (are they necessary?). Both come back as plain `Graft`s, so they run in the same
batched call as the graft they control.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from weightgraft.engine.graft import Graft
from weightgraft.errors import UserError

DIMENSIONS = ("positions", "layers", "heads", "neurons")


class ControlError(UserError, ValueError):
    """A control that cannot be drawn for this graft."""


def random_like(
    graft: Graft,
    grafter,
    n_draws: int = 5,
    seed: int = 0,
    *,
    vary: str | Sequence[str] | None = None,
    length: int | None = None,
) -> list[Graft]:
    """`n_draws` grafts like `graft` with the dimensions in `vary` redrawn at random, each with as
    many positions, layers, heads or neurons as `graft` has; the draws differ from each other and
    from `graft`. Seeded: the same seed gives the same draws.

    `vary` defaults to the finest dimension `graft` narrows (heads, then neurons), else layers.
    `length` (the row's real tokens) is needed to redraw positions.
    """
    if isinstance(n_draws, bool) or not isinstance(n_draws, int) or n_draws < 1:
        raise ControlError(f"n_draws must be an int >= 1, not {n_draws!r}")
    dims = _dimensions(graft, vary)
    current = {dim: _chosen(graft, grafter, dim, length) for dim in dims}
    spaces = {dim: _space(graft, grafter, dim, length) for dim in dims}
    drawn = draw_sets(
        [current[d] for d in dims], [spaces[d] for d in dims], n_draws, seed, ", ".join(dims), repr(graft)
    )
    return [replace(graft, **{d: list(v) for d, v in zip(dims, draw)}) for draw in drawn]


def draw_sets(
    current: Sequence[tuple[int, ...]],
    spaces: Sequence[Sequence[int]],
    n_draws: int,
    seed: int | str | random.Random,
    what: str,
    of: str = "the graft",
    hint: str = "ask for fewer (n_draws) or vary more dimensions",
) -> list[tuple[tuple[int, ...], ...]]:
    """`n_draws` draws, each a sorted sample of `spaces[i]` as large as `current[i]` for every
    dimension i; the draws differ from each other and from `current`. The first k draws do not
    depend on `n_draws`. Shared by `random_like` and the run planner's controls."""
    rng = seed if isinstance(seed, random.Random) else random.Random(seed)
    for chosen, space in zip(current, spaces):
        if len(chosen) > len(space):
            raise ControlError(f"{len(chosen)} {what} cannot be drawn from {len(space)}; {hint}")
    seen = {tuple(current)}
    draws: list[tuple[tuple[int, ...], ...]] = []
    for _ in range(200 * n_draws):
        if len(draws) == n_draws:
            break
        drawn = tuple(tuple(sorted(rng.sample(list(space), len(chosen)))) for chosen, space in zip(current, spaces))
        if drawn in seen:
            continue
        seen.add(drawn)
        draws.append(drawn)
    if len(draws) < n_draws:
        raise ControlError(f"only {len(draws)} random draws of {what} differ from {of}; {hint}")
    return draws


def complement(graft: Graft, grafter, *, length: int | None = None) -> list[Graft]:
    """Grafts of everything `graft` does not cover (the donor everywhere except `graft`): every
    other position, every other (layer, component) at its positions, and the other heads or
    neurons of the keys it narrows. `length` is needed for positions other than "all" and "last".
    """
    donor = graft.donor
    kind, value = graft._positions
    out: list[Graft] = []
    if kind == "last":
        out.append(Graft(slice(None, -1), donor=donor))
        here = graft.positions
    elif kind != "all":
        if length is None:
            raise ControlError(f"the complement of positions {graft.positions!r} needs length= (the row's real tokens)")
        chosen = graft.position_indices(length)
        others = [p for p in range(length) if p not in chosen]
        if others:
            out.append(Graft(others, donor=donor))
        here = chosen
    else:
        here = "all"
    covered = set(graft.keys(grafter.adapter, grafter.num_layers))
    missing: dict[str, list[int]] = {}
    model_level: list[str] = []
    for layer, comp in grafter.keys:
        if (layer, comp) in covered:
            continue
        if layer is None:
            model_level.append(comp)
        else:
            missing.setdefault(comp, []).append(layer)
    by_layers: dict[tuple[int, ...], list[str]] = {}
    for comp, layers in missing.items():
        by_layers.setdefault(tuple(layers), []).append(comp)
    out += [Graft(here, list(layers), comps, donor=donor) for layers, comps in by_layers.items()]
    if model_level:
        out.append(Graft(here, "all", model_level, donor=donor))
    if graft.units is not None:
        name, units = graft.units
        layers = sorted({layer for layer, _ in covered})
        for comp in sorted({c for _, c in covered}):
            others = [u for u in range(grafter.units[comp].count) if u not in units]
            if others:
                out.append(Graft(here, layers, comp, donor=donor, **{name: others}))
    return out


def _dimensions(graft: Graft, vary: str | Sequence[str] | None) -> tuple[str, ...]:
    if vary is None:
        vary = graft.units[0] if graft.units is not None else "layers"
    dims = (vary,) if isinstance(vary, str) else tuple(vary)
    unknown = [d for d in dims if d not in DIMENSIONS]
    if unknown or not dims:
        raise ControlError(f"vary must name some of {list(DIMENSIONS)}, not {vary!r}")
    for d in dims:
        if d in ("heads", "neurons") and (graft.units is None or graft.units[0] != d):
            raise ControlError(f"cannot vary {d}: {graft!r} names no {d}")
    return tuple(dict.fromkeys(dims))


def _chosen(graft: Graft, grafter, dim: str, length: int | None) -> tuple[int, ...]:
    if dim == "positions":
        if length is None:
            raise ControlError("redrawing positions needs length= (the row's real tokens)")
        return tuple(graft.position_indices(length))
    if dim == "layers":
        return tuple(graft.layer_indices(grafter.num_layers))
    return graft.units[1]


def _space(graft: Graft, grafter, dim: str, length: int | None) -> list[int]:
    if dim == "positions":
        return list(range(length))
    if dim == "layers":
        return list(range(grafter.num_layers))
    comps = sorted({c for _, c in graft.keys(grafter.adapter, grafter.num_layers)})
    return list(range(min(grafter.units[c].count for c in comps)))
