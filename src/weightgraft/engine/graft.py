"""`Graft`: what to compute with the donor's weights, where.

A Graft names token positions, layers and components. It is resolved against a model (its
adapter and depth) into a set of grafted (layer, component) keys, and against a row of input
(its real tokens) into token positions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from weightgraft.adapters.base import GROUPS, MODEL_LEVEL, PER_LAYER, Adapter
from weightgraft.engine.roles import NotApplicable, PositionExpr, parse_positions
from weightgraft.engine.units import EXPERT_COMPONENTS, HEAD_COMPONENTS, NEURON_COMPONENTS, UnitError

Positions = str | int | Sequence[int] | slice | torch.Tensor | Sequence[bool]
Layers = str | int | Sequence[int] | range
Components = str | Sequence[str]

VOCABULARY = MODEL_LEVEL + PER_LAYER + GROUPS

# Bands of the layer stack: name -> (index, number of bands).
# One name per band (no aliases): halves and quarters by ordinal, eighths by number.
_HALF_BANDS = {"first_half": (0, 2), "last_half": (1, 2)}
_QUARTER_BANDS = {"first_quarter": (0, 4), "second_quarter": (1, 4), "third_quarter": (2, 4), "last_quarter": (3, 4)}
_EIGHTH_BANDS = {f"eighth_{i + 1}": (i, 8) for i in range(8)}
BANDS: dict[str, tuple[int, int]] = _HALF_BANDS | _QUARTER_BANDS | _EIGHTH_BANDS
HALVES = ["first_half", "last_half"]
QUARTERS = ["first_quarter", "second_quarter", "third_quarter", "last_quarter"]
EIGHTHS = [f"eighth_{i + 1}" for i in range(8)]

# A grafted (layer, component) key; layer is None for model-level components.
Key = tuple[int | None, str]


def band_layers(name: str, num_layers: int) -> list[int]:
    """Layers of a named band: band k of n covers [k*L//n, (k+1)*L//n)."""
    if name not in BANDS:
        raise ValueError(f"unknown layer band {name!r}; use 'all', ints, or one of {sorted(BANDS)}")
    k, n = BANDS[name]
    layers = list(range(k * num_layers // n, (k + 1) * num_layers // n))
    if not layers:
        raise ValueError(f"band {name!r} is empty for a model with {num_layers} layers")
    return layers


@dataclass(frozen=True, eq=False)
class Graft:
    """Compute `components` of `layers` with a donor's weights at `positions`.

    `layers` restricts per-layer components. Model-level components (embed, pos_embed, ln_final,
    lm_head) are grafted when named explicitly, or through a group only when layers="all".
    `donor` names one of the Grafter's donors; None means its only donor.
    `heads` (with components among q, k, v, o; k and v count key-value heads) or `neurons` (with
    gate, up, down or the group mlp) or `experts` (with the component experts of a mixture-of-experts
    model) narrows the graft to those units (see `engine.units`).
    A Graft is hashable by identity (eq=False), so the engine can cache its resolution.

    Args:
        positions: "all", "last", a role expression ("FE+LT", "(FE+LT)^C"; the call then takes
            `Prompt`s), an int, ints, a slice or a boolean mask, over a row's real tokens.
        layers: "all", an int, ints, a range or a band ("last_quarter", "eighth_3", ...).
        components: a component name or names, or a group (attn, mlp, norms, all).
        donor: the Grafter's donor to take the weights from; None: its only donor.
        heads: q, k, v or o heads only (k and v: key-value heads).
        neurons: gate, up or down neurons only.
        experts: single experts of a mixture-of-experts `experts` component only (the router's
            choice stays the recipient's unless the router is grafted too).

    Raises:
        ValueError: an unknown component, band or position string; an empty layer list.
        TypeError: positions or layers of a type that could be misread.
        UnitError: more than one of heads, neurons and experts, or units on components without them.
    """

    positions: Positions = "all"
    layers: Layers = "all"
    components: Components = "all"
    donor: str | None = None
    heads: int | Sequence[int] | None = None
    neurons: int | Sequence[int] | None = None
    experts: int | Sequence[int] | None = None

    def __post_init__(self) -> None:
        names = [self.components] if isinstance(self.components, str) else list(self.components)
        if not names:
            raise ValueError("Graft needs at least one component")
        unknown = [n for n in names if n not in VOCABULARY]
        if unknown:
            raise ValueError(f"unknown component(s) {unknown}; valid names: {list(VOCABULARY)}")
        if isinstance(self.layers, str) and self.layers != "all" and self.layers not in BANDS:
            raise ValueError(f"unknown layer band {self.layers!r}; use 'all', ints, or one of {sorted(BANDS)}")
        if not isinstance(self.layers, str):
            _check_layers(self.layers)
        if self.donor is not None and not isinstance(self.donor, str):
            raise TypeError(f"Graft donor must be a donor's name (a str) or None, not {type(self.donor).__name__}")
        object.__setattr__(self, "_units", normal_units(self.heads, self.neurons, names, self.experts))
        # The positions in one normal form, read once: ("all"|"last", None), ("slice", slice),
        # ("mask", tuple of bools), ("list", tuple of ints) or ("roles", a parsed role expression).
        object.__setattr__(self, "_positions", _normal_positions(self.positions))

    def __repr__(self) -> str:
        donor = "" if self.donor is None else f", donor={self.donor!r}"
        for name in ("heads", "neurons", "experts"):
            if getattr(self, name) is not None:
                donor += f", {name}={getattr(self, name)!r}"
        return f"Graft(positions={self.positions!r}, layers={self.layers!r}, components={self.components!r}{donor})"

    @property
    def units(self) -> tuple[str, tuple[int, ...]] | None:
        """("heads", "neurons" or "experts", the sorted unit indices), or None for whole components."""
        return self._units

    # --- resolution against a model -------------------------------------------------------
    def layer_indices(self, num_layers: int) -> list[int]:
        spec = self.layers
        if isinstance(spec, str):
            return list(range(num_layers)) if spec == "all" else band_layers(spec, num_layers)
        indices = [spec] if isinstance(spec, int) else list(spec)
        out = []
        for i in indices:
            if not -num_layers <= int(i) < num_layers:
                raise ValueError(
                    f"layer {i} is outside a model of {num_layers} layers (use {-num_layers}..{num_layers - 1})"
                )
            out.append(int(i) % num_layers)
        return sorted(set(out))

    def keys(self, adapter: Adapter, num_layers: int) -> list[Key]:
        """The (layer, component) keys this graft covers on a model."""
        names = [self.components] if isinstance(self.components, str) else list(self.components)
        valid = adapter.components
        missing = [n for n in names if n not in GROUPS and n not in valid]
        if missing:
            raise ValueError(
                f"this {adapter.model_types[0]} model has no component(s) {missing}; "
                f"valid: {list(valid) + list(GROUPS)}"
            )
        all_layers = isinstance(self.layers, str) and self.layers == "all"
        chosen: list[str] = []
        for n in names:
            if n in GROUPS:
                chosen += [c for c in adapter.group(n) if c not in MODEL_LEVEL or all_layers]
            else:
                chosen.append(n)
        layers = self.layer_indices(num_layers)
        keys: list[Key] = []
        for c in dict.fromkeys(chosen):
            if c in MODEL_LEVEL:
                keys.append((None, c))
            else:
                keys += [(layer, c) for layer in layers]
        return keys

    # --- resolution against a row -----------------------------------------------------------
    def position_indices(self, length: int, roles: dict[str, list[int]] | None = None) -> list[int]:
        """Indices among a row's `length` real tokens; `roles` (role name -> token indices, a
        `weightgraft.Prompt`'s) resolves a role expression such as "FE+LT"."""
        kind, value = self._positions
        if kind == "roles":
            return role_indices(value, length, roles)
        if kind == "all":
            return list(range(length))
        if kind == "last":
            return [length - 1]
        if kind == "slice":
            return list(range(length))[value]
        if kind == "mask":
            if len(value) != length:
                raise ValueError(
                    f"a boolean position mask has length {len(value)}, but the row has {length} real "
                    "tokens; give one entry per real token (padding excluded)"
                )
            return [i for i, v in enumerate(value) if v]
        out = []
        for p in value:
            if not -length <= p < length:
                raise ValueError(f"position {p} is outside a row of {length} real tokens")
            out.append(p % length)
        return sorted(set(out))


def normal_units(
    heads: object, neurons: object, names: list[str], experts: object = None
) -> tuple[str, tuple[int, ...]] | None:
    """Heads, neurons or experts as sorted unique ints >= 0, checked against the components they narrow."""
    given = [
        (kind, spec)
        for kind, spec in (("heads", heads), ("neurons", neurons), ("experts", experts))
        if spec is not None
    ]
    if len(given) > 1:
        raise UnitError(
            "a Graft takes one of heads=, neurons= or experts=, not both; make one Graft for each kind of unit"
        )
    if not given:
        return None
    kind, spec = given[0]
    values = [spec] if _is_int(spec) else list(spec) if isinstance(spec, (Sequence, range)) else None
    if isinstance(spec, (np.ndarray, torch.Tensor)):
        values = list(spec.reshape(-1))
    if values is None or not values or any(not _is_int(v) or int(v) < 0 for v in values):
        raise UnitError(f"{kind} must be an int >= 0 or a non-empty sequence of them, not {spec!r}")
    if kind == "heads":
        wrong = [n for n in names if n not in HEAD_COMPONENTS]
        if wrong:
            raise UnitError(
                f"component(s) {wrong} have no heads: heads= narrows q, k, v or o (name them, e.g. "
                "components='o'); k and v count key-value heads"
            )
    elif kind == "experts":
        wrong = [n for n in names if n not in EXPERT_COMPONENTS]
        if wrong:
            raise UnitError(
                f"component(s) {wrong} have no experts: experts= narrows the component experts (name it: "
                "components='experts'); graft the router as well to take the donor's routing"
            )
    else:
        wrong = [n for n in names if n not in NEURON_COMPONENTS and n != "mlp"]
        if wrong:
            raise UnitError(
                f"component(s) {wrong} are not FFN components: neurons= narrows gate, up, down or the group mlp"
            )
    return kind, tuple(sorted({int(v) for v in values}))


_POSITIONS_HELP = (
    "positions must be 'all', 'last', a role expression ('FE+LT', '(FE+LT)^C', 'M'), an int, a "
    "sequence/array/tensor of ints, a slice, or a boolean mask (list, NumPy array or torch tensor "
    "of bools, one per real token)"
)


def role_indices(expr: PositionExpr, length: int, roles: dict[str, list[int]] | None) -> list[int]:
    """A role expression's token indices on a row of `length` real tokens whose roles are
    `roles`; a row without roles (bare token ids) or without a role the expression names is
    refused, naming the fix."""
    if roles is None:
        raise ValueError(
            f"Graft positions {expr.text!r} name token roles, but this row is bare token ids; pass "
            "prompts with roles (weightgraft.Prompt, or a list of them) in place of input_ids"
        )
    try:
        return expr.evaluate(roles, length)
    except NotApplicable as err:
        raise ValueError(
            f"Graft positions {expr.text!r}: {err}; give the prompt that entity (e.g. Prompt(..., movie=...)) "
            "or graft other roles"
        ) from None


def _normal_positions(spec: object) -> tuple[str, object]:
    """Read a positions spec once; anything ambiguous (floats, nested lists, ints mixed with
    bools, a bare bool) is an error rather than a guess."""
    if isinstance(spec, str):
        if spec in ("all", "last"):
            return spec, None
        try:
            return "roles", parse_positions(spec)
        except ValueError as err:
            raise ValueError(f"{_POSITIONS_HELP}; got the string {spec!r} ({err})") from None
    if isinstance(spec, slice):
        for part in (spec.start, spec.stop, spec.step):
            if part is not None and not _is_int(part):
                raise TypeError(f"{_POSITIONS_HELP}; got a slice with a non-integer bound: {spec!r}")
        return "slice", spec
    if isinstance(spec, (bool, np.bool_)):
        raise TypeError(f"{_POSITIONS_HELP}; got a bare bool {spec!r} (a mask needs one entry per token)")
    if _is_int(spec):
        return "list", (int(spec),)
    if isinstance(spec, torch.Tensor):
        spec = spec.detach().cpu().numpy()
    if isinstance(spec, np.ndarray):
        if spec.ndim > 1:
            raise ValueError(f"{_POSITIONS_HELP}; got an array of shape {spec.shape} (give one dimension)")
        if spec.dtype.kind == "b":
            return "mask", tuple(bool(v) for v in spec.reshape(-1))
        if spec.dtype.kind in "iu":
            return "list", tuple(int(v) for v in spec.reshape(-1))
        raise TypeError(f"{_POSITIONS_HELP}; got an array of dtype {spec.dtype}")
    if not isinstance(spec, (Sequence, range)):
        raise TypeError(f"{_POSITIONS_HELP}; got {type(spec).__name__}: {spec!r}")
    values = list(spec)
    bools = [isinstance(v, (bool, np.bool_)) for v in values]
    if values and all(bools):
        return "mask", tuple(bool(v) for v in values)
    bad = [v for v, b in zip(values, bools) if b or not _is_int(v)]
    if bad:
        raise TypeError(f"{_POSITIONS_HELP}; got {spec!r}, whose entries {bad[:4]} are not all ints or all bools")
    return "list", tuple(int(v) for v in values)


def _check_layers(spec: object) -> None:
    """Layers are ints (one, or a sequence/range/array of them); bools and floats are refused
    rather than read as layer numbers."""
    if isinstance(spec, (Sequence, range, np.ndarray, torch.Tensor)):
        values = list(spec.reshape(-1)) if isinstance(spec, (np.ndarray, torch.Tensor)) else list(spec)
    else:
        values = [spec]
    if not values:
        # An empty list would graft nothing and read like a finding of no effect.
        raise ValueError(
            "Graft layers is empty, so the graft would change nothing; name one or more layers, a band or 'all'"
        )
    bad = [v for v in values if not _is_int(v)]
    if bad:
        raise TypeError(
            f"layers must be 'all', a band name, an int or a sequence of ints; got {spec!r} "
            f"(entries {bad[:4]} are not ints)"
        )


def _is_int(value: object) -> bool:
    """An integer that is not a bool: Python ints, NumPy integers, 0-d integer tensors."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, torch.Tensor):
        return (
            value.dim() == 0
            and not value.dtype.is_floating_point
            and value.dtype != torch.bool
            and not value.is_complex()
        )
    return isinstance(value, (int, np.integer))


def as_graft_list(spec: Graft | Sequence[Graft] | None) -> list[Graft]:
    if spec is None:
        return []
    if isinstance(spec, Graft):
        return [spec]
    grafts = list(spec)
    for g in grafts:
        if not isinstance(g, Graft):
            raise TypeError(f"expected Graft objects, got {type(g).__name__}: {g!r}")
    return grafts
