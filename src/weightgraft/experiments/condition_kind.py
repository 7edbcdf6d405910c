"""What part a condition plays in its experiment's report, decided once from its tags.

A condition's `meta` is the condition language's open set of tags (a config may add its own). The
plots and the finer sections need to know which rows are sweep cells, head cells, curve points,
controls or references; `kind_of` reads the tags once, when a record is built, and everything after
reads the typed kind instead of looking keys up by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# Tags that leave a row plain: the bar chart and the conditions' list show it by itself.
PLAIN_TAGS = frozenset({"reference", "components", "layer"})
CURVE_SHAPES = ("rank", "scale")


@dataclass(frozen=True)
class Plain:
    """A row shown by itself; `reference` names its role (recipient, donor, component) when it
    is one, `layer` the one layer a component reference covers (None: its whole band)."""

    reference: str | None = None
    components: str = ""
    layer: int | None = None


@dataclass(frozen=True)
class SweepCell:
    """One cell of a layer sweep: `components` at positions `at` in layer band `band`."""

    at: str
    components: str
    band: str


@dataclass(frozen=True)
class HeadCell:
    """One cell of a layer x head map of `components`."""

    layer: int
    head: int
    components: str = ""


@dataclass(frozen=True)
class CurvePoint:
    """One point of a rank or dose curve (`shape`), at `x`, of the curve named `series`."""

    shape: str
    x: Any  # a rank (int or "full") or a scale (float)
    series: str = ""


@dataclass(frozen=True)
class Control:
    """A control row: a `random` draw or the `complement` of the row named `of`."""

    control: str
    of: str | None


@dataclass(frozen=True)
class Tagged:
    """A row with tags of the config's own: shown in the finer part of the report."""


ConditionKind = Plain | SweepCell | HeadCell | CurvePoint | Control | Tagged


def _required(meta: Mapping, keys: tuple[str, ...], what: str) -> list:
    missing = [k for k in keys if k not in meta]
    if missing:
        raise ValueError(f"a {what} condition's meta needs {missing} (it has {sorted(meta)}); add them")
    return [meta[k] for k in keys]


def kind_of(meta: Mapping) -> ConditionKind:
    """The kind a condition's tags give it (a control first: it carries its row's tags too).

    Raises:
        ValueError: a head cell without its layer or head, a curve point without its x.
    """
    if "control" in meta:
        return Control(str(meta["control"]), meta.get("of"))
    if meta.get("sweep_at"):
        return SweepCell(meta["sweep_at"], meta.get("components", ""), meta.get("band", ""))
    if set(meta) <= PLAIN_TAGS:
        return Plain(meta.get("reference"), meta.get("components", ""), meta.get("layer"))
    if meta.get("grain") == "head":
        layer, head = _required(meta, ("layer", "head"), "`grain: head`")
        return HeadCell(layer, head, meta.get("components", ""))
    shape = meta.get("shape")
    if shape in CURVE_SHAPES:
        (x,) = _required(meta, (shape,), f"`shape: {shape}`")
        return CurvePoint(shape, x, meta.get("series", ""))
    return Tagged()
