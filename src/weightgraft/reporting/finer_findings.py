"""What an experiment's finer rows show, computed once: its head maps and curves (`finer`), each
judged by the one decision rule (`decision.decide`: a row's whole interval on one side of its
reference's value, "inconclusive" when it straddles it; top-5 and probability combined by
`decision.combine`). The plots (`finer_plots`) and the report's tables (`finer_section`) format
these objects and decide nothing themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from weightgraft.experiments.record import ExperimentRecord
from weightgraft.experiments.vocabulary import DECISION_METRICS
from weightgraft.reporting.decision import Decision, Outcome, combine, decide
from weightgraft.reporting.finer import Curve, Estimate, Estimates, HeadMap, curves, head_maps, random_mean
from weightgraft.reporting.summary import SummaryRow

NO_DECISION = (float("nan"), float("nan"), float("nan"), 0.0)  # decide() on these: undefined


def judge(values: Estimates, reference: Estimates | None, direction: str = "at_least") -> Outcome:
    """Whether a row is above (`at_least`) or below (`at_most`) a reference's value on top-5
    and probability together, by the decision rule on the row's own interval (undefined
    without a reference)."""
    if reference is None:
        return Outcome.UNDEFINED
    decisions: dict[str, Decision] = {}
    for metric in DECISION_METRICS:
        est, ref = values[metric], reference[metric]
        if not (est.defined and ref.defined):
            decisions[metric] = decide(*NO_DECISION, direction, 0)
            continue
        low = est.value if est.low is None else est.low
        high = est.value if est.high is None else est.high
        if low == high == ref.value:  # the same value at every resample: nothing to decide on it
            decisions[metric] = decide(*NO_DECISION, direction, 0)
            continue
        decisions[metric] = decide(est.value, low, high, ref.value, direction, est.n_facts or 0)
    return combine(decisions)[0]


@dataclass(frozen=True)
class HeadFindings:
    """A head map with each cell judged against the recipient alone."""

    grid: HeadMap
    above_recipient: dict[tuple[int, int], Outcome]


@dataclass(frozen=True)
class CurveFindings:
    """A curve with each point judged against its reference (`against`: the full-rank point of a
    rank curve, the recipient alone for a dose curve); None for the reference point itself.
    `beats_controls`: the dose of lambda = 1 against its random controls' mean (None where it has
    none, and on rank curves)."""

    curve: Curve
    against: Estimates | None
    outcomes: list[Outcome | None]
    beats_controls: Outcome | None = None


@dataclass(frozen=True)
class FinerFindings:
    """Every finer object of one experiment (all empty when it has no finer rows)."""

    heads: list[HeadFindings]
    ranks: list[CurveFindings]
    doses: list[CurveFindings]


def _judged(curve: Curve, against: Estimates | None) -> list[Outcome | None]:
    return [None if point.values is against else judge(point.values, against) for point in curve.points]


def _dose_controls(curve: Curve) -> Outcome | None:
    one = next((p for x, p in zip(curve.xs, curve.points) if x == 1 and p.random), None)
    if one is None:
        return None
    means = {m: random_mean(one, m) for m in DECISION_METRICS}
    if any(v is None for v in means.values()):
        return None
    return judge(one.values, {m: Estimate("random controls' mean", v, v, v) for m, v in means.items()})


def finer_findings(rows: list[SummaryRow], record: ExperimentRecord) -> FinerFindings:
    """The experiment's head maps and curves from its pooled summary rows, judged."""
    heads = []
    for grid in head_maps(rows, record):
        recipient = grid.refs.get("recipient")
        heads.append(HeadFindings(grid, {cell: judge(c.values, recipient) for cell, c in grid.cells.items()}))
    ranks = []
    for curve in curves(rows, record, "rank"):
        full = next((p.values for x, p in zip(curve.xs, curve.points) if x == "full"), None)
        ranks.append(CurveFindings(curve, full, _judged(curve, full)))
    doses = []
    for curve in curves(rows, record, "scale"):
        recipient = curve.refs.get("recipient")
        doses.append(CurveFindings(curve, recipient, _judged(curve, recipient), _dose_controls(curve)))
    return FinerFindings(heads, ranks, doses)
