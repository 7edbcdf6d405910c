"""The report's tables and sentences for grafts finer than a component (`finer`'s head maps, rank
curves and dose curves): one short table per plot with its numbers and 95% intervals, and one
plain sentence of what it shows, decided by the one rule (`decision.decide`: a row's whole
interval on one side of its reference's value; "inconclusive" when it straddles it; top-5 and
probability combined by `decision.combine`). Marked as weightgraft's extension, not a finding of
the paper."""

from __future__ import annotations

from weightgraft.experiments.record import ExperimentRecord
from weightgraft.experiments.vocabulary import DECISION_METRICS, METRIC_WORDS
from weightgraft.reporting.decision import Decision, Outcome, combine, decide
from weightgraft.reporting.finer import (
    Controlled,
    Curve,
    Estimate,
    Estimates,
    HeadMap,
    curves,
    head_maps,
    random_mean,
)
from weightgraft.reporting.numbers import number, with_interval
from weightgraft.reporting.summary import SummaryRow

EXTENSION_NOTE = (
    "*weightgraft's extension of the paper's analysis (grafts finer than a component), not a finding of the paper.*"
)
COST_WORDS = (
    "The complement's cost: the component with every head in that layer (the scope a head and its "
    "complement make up; the donor alone where the run has no such row) minus the complement control, "
    "with the complement's 95% interval."
)
ROLE_WORDS = {"recipient": "the recipient alone", "donor": "the donor alone", "component": "the whole component"}


def _num(value: float | None) -> str:
    """A probability of 4e-4 that decides a row must not print as 0.000."""
    return number(value, small=True)


def _ci(value, low, high, sign: bool = False) -> str:
    return with_interval(value, low, high, digits=3, interval_digits=2, sign=sign, small=True)


def _shifted(values: Estimates, metric: str, by: float | None, sign: bool = True) -> str:
    """A row's value and interval minus `by` (a reference's value), as text."""
    est = values[metric]
    if by is None or not est.defined:
        return "n/a"
    low = None if est.low is None else est.low - by
    high = None if est.high is None else est.high - by
    return _ci(est.value - by, low, high, sign)


def judge(values: Estimates, reference: Estimates | None, direction: str = "at_least") -> tuple[Outcome, str]:
    """Whether a row is above (`at_least`) or below (`at_most`) a reference's value on top-5
    and probability together, by the decision rule on the row's own interval."""
    if reference is None:
        return Outcome.UNDEFINED, "no reference"
    decisions: dict[str, Decision] = {}
    for metric in DECISION_METRICS:
        est, ref = values[metric], reference[metric]
        if not (est.defined and ref.defined):
            decisions[metric] = decide(float("nan"), float("nan"), float("nan"), 0.0, direction, 0)
            continue
        low = est.value if est.low is None else est.low
        high = est.value if est.high is None else est.high
        if low == high == ref.value:  # the same value at every resample: nothing to decide on it
            decisions[metric] = decide(float("nan"), float("nan"), float("nan"), 0.0, direction, 0)
            continue
        decisions[metric] = decide(est.value, low, high, ref.value, direction, est.n_facts or 0)
    return combine(decisions)


def _grouped(outcomes: dict[str, Outcome]) -> str:
    """`appears: a, b (2); inconclusive: c (1)` over the named outcomes."""
    parts = []
    for outcome in (Outcome.APPEARS, Outcome.DOES_NOT_APPEAR, Outcome.INCONCLUSIVE, Outcome.UNDEFINED):
        names = [n for n, o in outcomes.items() if o == outcome]
        if names:
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            parts.append(f"{outcome}: {shown} ({len(names)})")
    return "; ".join(parts)


def head_table(grid: HeadMap) -> list[str]:
    """One line per (layer, head): values, effects against the recipient alone, the
    complement's cost (`HeadMap.cost`), the random heads' mean and the outcome."""
    lines = [
        "| layer | head | top-5 | top-5 - recipient [95% CI] | prob - recipient [95% CI] | "
        "complement's cost, top-5 [95% CI] | random heads, top-5 (mean) | above the recipient? |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    recipient = grid.refs.get("recipient")
    costs = {bound: grid.cost("top5", bound) for bound in ("value", "low", "high")}
    for (layer, head), cell in sorted(grid.cells.items()):
        i, j = grid.layers.index(layer), grid.heads.index(head)
        cost = _ci(*(_nan_none(costs[b][i][j]) for b in ("value", "low", "high")), sign=True)
        lines.append(
            f"| {layer} | {head} | {_num(cell.values['top5'].value)} | "
            f"{_shifted(cell.values, 'top5', grid.baseline('recipient', 'top5'))} | "
            f"{_shifted(cell.values, 'prob', grid.baseline('recipient', 'prob'))} | {cost} | "
            f"{_num(random_mean(cell, 'top5'))} | {judge(cell.values, recipient)[0]} |"
        )
    return lines + ["", COST_WORDS]


def _nan_none(value: float) -> float | None:
    return None if value != value else value


def head_sentence(grid: HeadMap) -> str:
    """What the head map shows, by the decision rule against the recipient alone."""
    recipient = grid.refs.get("recipient")
    if recipient is None:
        return f"The map of {grid.components} per head has no recipient-alone row to compare with."
    outcomes = {f"L{layer} h{head}": judge(cell.values, recipient)[0] for (layer, head), cell in grid.cells.items()}
    return (
        f"Is one head of {grid.components} enough to raise top-5 and probability above "
        f"{ROLE_WORDS['recipient']} (`{recipient['top5'].condition}`; the cell's whole 95% interval above "
        f"its value)? Of {len(outcomes)} cells: {_grouped(outcomes)}."
    )


def _ref_lines(curve: Curve) -> list[str]:
    return [
        f"| {ROLE_WORDS.get(role, role)} (`{values['top5'].condition}`) | "
        + " | ".join(_ci(values[m].value, values[m].low, values[m].high) for m in DECISION_METRICS)
        + " | |"
        for role, values in curve.refs.items()
    ]


def _control_lines(point: Controlled, x) -> list[str]:
    return [
        f"| random control {i + 1} at {_x(x)} (`{draw['top5'].condition}`) | "
        + " | ".join(_ci(draw[m].value, draw[m].low, draw[m].high) for m in DECISION_METRICS)
        + " | |"
        for i, draw in enumerate(point.random)
    ]


def curve_table(curve: Curve, against: Estimates | None, against_words: str) -> list[str]:
    """One line per point (value and interval on each metric, outcome against a reference),
    then its random controls and the references."""
    label = "rank" if curve.kind == "rank" else "lambda"
    lines = [
        f"| {label} | " + " | ".join(f"{METRIC_WORDS[m]} [95% CI]" for m in DECISION_METRICS) + f" | {against_words} |",
        "|---|" + "---:|" * len(DECISION_METRICS) + "---|",
    ]
    for x, point in zip(curve.xs, curve.points):
        cells = " | ".join(
            _ci(point.values[m].value, point.values[m].low, point.values[m].high) for m in DECISION_METRICS
        )
        verdict = "(the reference)" if point.values is against else judge(point.values, against)[0]
        lines.append(f"| {_x(x)} | {cells} | {verdict} |")
    for x, point in zip(curve.xs, curve.points):
        lines += _control_lines(point, x)
    return lines + _ref_lines(curve)


def _x(x) -> str:
    return x if isinstance(x, str) else f"{x:g}"


def rank_sentence(curve: Curve) -> str:
    """Which ranks reach the whole change's value, by the decision rule."""
    full = next((p.values for x, p in zip(curve.xs, curve.points) if x == "full"), None)
    if full is None:
        return f"The {curve.series} rank curve has no full-rank point to compare with."
    outcomes = {f"rank {_x(x)}": judge(p.values, full)[0] for x, p in zip(curve.xs, curve.points) if x != "full"}
    reached = [name for name, o in outcomes.items() if o == Outcome.APPEARS]
    lowest = f"the lowest rank that does is {reached[0]}" if reached else "no rank below full does by the rule"
    return (
        f"Does the {curve.series} change truncated to rank k reach the whole change's top-5 and probability "
        f"(the point's whole 95% interval at or above the full-rank value)? {_grouped(outcomes)}; {lowest}."
    )


def dose_sentence(curve: Curve) -> str:
    """Which doses lie above the recipient alone, and whether lambda = 1 beats its controls."""
    recipient = curve.refs.get("recipient")
    if recipient is None:
        return f"The {curve.series} dose curve has no recipient-alone row to compare with."
    outcomes = {f"lambda {_x(x)}": judge(p.values, recipient)[0] for x, p in zip(curve.xs, curve.points)}
    text = (
        f"Which doses of the {curve.series} change lift top-5 and probability above the recipient alone "
        f"(`{recipient['top5'].condition}`)? {_grouped(outcomes)}."
    )
    one = next((p for x, p in zip(curve.xs, curve.points) if x == 1 and p.random), None)
    if one is not None:
        means = {m: random_mean(one, m) for m in DECISION_METRICS}
        if all(v is not None for v in means.values()):
            control = {m: Estimate("random controls' mean", v, v, v) for m, v in means.items()}
            text += f" At lambda = 1 against its random controls' mean: {judge(one.values, control)[0]}."
    return text


def experiment_finer(rows: list[SummaryRow], record: ExperimentRecord) -> list[str]:
    """The finer tables and sentences of one experiment (nothing when it has no finer rows)."""
    lines: list[str] = []
    for grid in head_maps(rows, record):
        lines += [f"### {grid.components} per head (layer x head)", "", EXTENSION_NOTE, "", head_sentence(grid), ""]
        lines += head_table(grid) + [""]
    for curve in curves(rows, record, "rank"):
        full = next((p.values for x, p in zip(curve.xs, curve.points) if x == "full"), None)
        lines += [f"### {curve.series} by rank of the change", "", EXTENSION_NOTE, "", rank_sentence(curve), ""]
        lines += curve_table(curve, full, "reaches full?") + [""]
    for curve in curves(rows, record, "scale"):
        lines += [f"### {curve.series} dose-response", "", EXTENSION_NOTE, "", dose_sentence(curve), ""]
        lines += curve_table(curve, curve.refs.get("recipient"), "above the recipient?") + [""]
    return lines
