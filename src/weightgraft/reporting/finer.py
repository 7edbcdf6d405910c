"""The numbers of grafts finer than a component, read from a run's summary by their conditions'
kinds (`experiments.condition_kind`, from the tags of FINER_CONTRACT): a layer x head map (head
cells, `grain: head`), rank curves (`shape: rank`) and dose-response curves (`shape: scale`), each
with its references (`reference: recipient / donor / component`) and controls (`control: random /
complement`, `of`: the controlled row).

Values are the pooled rows (every template and fact kind) with their 95% intervals over facts,
exactly as summary.csv holds them; an effect is a row's value minus the recipient alone's value,
its interval the row's interval shifted by the same amount (the recipient's value is held fixed,
so the interval is the row's own uncertainty). The plots (`finer_plots`) and the report's tables
(`finer_section`) both read these objects, so what is drawn is what is written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from weightgraft.experiments.condition_kind import Control, CurvePoint, HeadCell, Plain
from weightgraft.experiments.record import ExperimentRecord
from weightgraft.experiments.vocabulary import DECISION_METRICS
from weightgraft.reporting.summary import SummaryRow, by_condition

REFERENCE_NAMES = {"recipient": ("PRE", "RECIPIENT"), "donor": ("SFT", "DONOR")}


@dataclass(frozen=True)
class Estimate:
    """One row's value with its 95% interval over facts (None: not applicable)."""

    condition: str
    value: float | None
    low: float | None
    high: float | None
    n_facts: int | None = None

    @property
    def defined(self) -> bool:
        return self.value is not None and math.isfinite(self.value)


Estimates = dict[str, Estimate]  # metric -> estimate


def estimates(table: dict, name: str, metrics=DECISION_METRICS) -> Estimates:
    """A condition's estimates on `metrics` (undefined where the summary has no value)."""
    out = {}
    for metric in metrics:
        row = table.get((name, metric))
        if row is None:
            out[metric] = Estimate(name, None, None, None)
        else:
            out[metric] = Estimate(name, row.value, row.ci_low, row.ci_high, row.n_facts)
    return out


def references(record: ExperimentRecord) -> dict[str, str]:
    """role (recipient, donor, component) -> condition name: by the rows' `reference` tag (a
    reference of one layer left out), else the recipient alone and the donor alone by their
    shorthand names."""
    out = {}
    for cond in record.conditions:
        kind = cond.kind
        if isinstance(kind, Plain) and kind.reference and kind.reference not in out and kind.layer is None:
            out[kind.reference] = cond.name
    names = [c.name for c in record.conditions]
    for role, known in REFERENCE_NAMES.items():
        if role not in out:
            found = [n for n in names if n in known]
            if found:
                out[role] = found[0]
    return out


def layer_whole_names(record: ExperimentRecord, components: str) -> dict[int, str]:
    """layer -> the `reference: component` row of `components` in that one layer (every head):
    the scope a head and its complement make up."""
    return {
        c.kind.layer: c.name
        for c in record.conditions
        if isinstance(c.kind, Plain)
        and c.kind.reference == "component"
        and c.kind.layer is not None
        and c.kind.components == components
    }


def controls_of(record: ExperimentRecord) -> dict[str, dict[str, list[str]]]:
    """controlled condition -> {"random": [names], "complement": [names]}."""
    out: dict[str, dict[str, list[str]]] = {}
    for cond in record.conditions:
        kind = cond.kind
        if isinstance(kind, Control) and kind.control in ("random", "complement") and kind.of is not None:
            out.setdefault(kind.of, {"random": [], "complement": []})[kind.control].append(cond.name)
    return out


@dataclass(frozen=True)
class Controlled:
    """A grid cell or curve point with its controls."""

    name: str
    values: Estimates
    random: list[Estimates] = field(default_factory=list)
    complement: Estimates | None = None


def controlled(table: dict, name: str, controls: dict) -> Controlled:
    mine = controls.get(name, {"random": [], "complement": []})
    return Controlled(
        name,
        estimates(table, name),
        [estimates(table, n) for n in mine["random"]],
        estimates(table, mine["complement"][0]) if mine["complement"] else None,
    )


def random_mean(point: Controlled, metric: str) -> float | None:
    """The mean of the random controls' values (None without any defined one)."""
    values = [r[metric].value for r in point.random if r[metric].defined]
    return sum(values) / len(values) if values else None


@dataclass(frozen=True)
class HeadMap:
    """Every (layer, head) cell of one component set, with the references of its experiment."""

    components: str
    layers: list[int]
    heads: list[int]
    cells: dict[tuple[int, int], Controlled]
    refs: dict[str, Estimates]
    wholes: dict[int, Estimates] = field(default_factory=dict)  # layer -> every head of that layer

    def _grid(self, pick) -> list[list[float]]:
        nan = float("nan")
        grid = [[nan] * len(self.heads) for _ in self.layers]
        for (layer, head), cell in self.cells.items():
            value = pick(layer, cell)
            grid[self.layers.index(layer)][self.heads.index(head)] = nan if value is None else value
        return grid

    def baseline(self, role: str, metric: str) -> float | None:
        ref = self.refs.get(role, {}).get(metric)
        return ref.value if ref is not None and ref.defined else None

    def effect(self, metric: str, bound: str = "value") -> list[list[float]]:
        """The cells' value (or `low`/`high` bound) minus the recipient alone's value."""
        base = self.baseline("recipient", metric)
        return self._grid(lambda _layer, c: _minus(getattr(c.values[metric], bound), base))

    def whole(self, layer: int, metric: str) -> float | None:
        """What a head and its complement make up: the component with every head in that layer
        (its `reference: component` row of that layer), else the donor alone."""
        ref = self.wholes.get(layer, {}).get(metric)
        if ref is not None:
            return ref.value if ref.defined else None
        return self.baseline("donor", metric)

    def cost(self, metric: str, bound: str = "value") -> list[list[float]]:
        """The complement's cost: the whole (`whole`) minus the complement's value (what the
        whole loses without this head); `bound` low/high: the interval from the complement's."""
        flip = {"value": "value", "low": "high", "high": "low"}[bound]

        def pick(layer: int, cell: Controlled) -> float | None:
            if cell.complement is None:
                return None
            return _minus(self.whole(layer, metric), getattr(cell.complement[metric], flip))

        return self._grid(pick)


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) else a - b


def head_maps(rows: list[SummaryRow], record: ExperimentRecord) -> list[HeadMap]:
    """One map per component set of the experiment's `grain: head` rows."""
    cells = [(c.name, c.kind) for c in record.conditions if isinstance(c.kind, HeadCell)]
    if not cells:
        return []
    table, controls = by_condition(rows, record.name), controls_of(record)
    refs = {role: estimates(table, name) for role, name in references(record).items()}
    out = []
    for comps in dict.fromkeys(cell.components for _, cell in cells):
        mine = [(name, cell) for name, cell in cells if cell.components == comps]
        out.append(
            HeadMap(
                comps,
                sorted({cell.layer for _, cell in mine}),
                sorted({cell.head for _, cell in mine}),
                {(cell.layer, cell.head): controlled(table, name, controls) for name, cell in mine},
                refs,
                {layer: estimates(table, name) for layer, name in layer_whole_names(record, comps).items()},
            )
        )
    return out


@dataclass(frozen=True)
class Curve:
    """One series of a rank or dose curve: points in x order, with their controls, and the
    experiment's references."""

    kind: str  # "rank" or "scale"
    series: str
    xs: list  # ranks (ints, then "full") or scales
    points: list[Controlled]
    refs: dict[str, Estimates]

    def ys(self, metric: str, bound: str = "value") -> list[float]:
        """The points' values (or `low`/`high` bounds) on `metric`, NaN where undefined."""
        out = []
        for point in self.points:
            value = getattr(point.values[metric], bound)
            out.append(float("nan") if value is None else value)
        return out


def _rank_order(rank) -> float:
    return math.inf if rank == "full" else float(rank)


def curves(rows: list[SummaryRow], record: ExperimentRecord, kind: str) -> list[Curve]:
    """The experiment's `shape: kind` rows (kind "rank" or "scale"), one curve per series."""
    points = [(c.name, c.kind) for c in record.conditions if isinstance(c.kind, CurvePoint) and c.kind.shape == kind]
    if not points:
        return []
    table, controls = by_condition(rows, record.name), controls_of(record)
    refs = {role: estimates(table, name) for role, name in references(record).items()}
    order = _rank_order if kind == "rank" else float
    out = []
    for series in dict.fromkeys(point.series for _, point in points):
        mine = sorted(((n, p) for n, p in points if p.series == series), key=lambda item: order(item[1].x))
        out.append(
            Curve(
                kind,
                series,
                [point.x for _, point in mine],
                [controlled(table, name, controls) for name, _ in mine],
                refs,
            )
        )
    return out
