"""The report's tables and sentences for grafts finer than a component, formatted from an
experiment's `FinerFindings` (head maps, rank curves and dose curves, judged there by the one
decision rule): one short table per plot with its numbers and 95% intervals, and one plain
sentence of what it shows. Marked as weightgraft's extension, not a finding of the paper."""

from __future__ import annotations

from weightgraft.experiments.vocabulary import DECISION_METRICS, METRIC_WORDS
from weightgraft.reporting.decision import Outcome
from weightgraft.reporting.finer import Controlled, Curve, Estimates, random_mean
from weightgraft.reporting.finer_findings import CurveFindings, FinerFindings, HeadFindings
from weightgraft.reporting.numbers import number, with_interval

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


def _grouped(outcomes: dict[str, Outcome]) -> str:
    """`appears: a, b (2); inconclusive: c (1)` over the named outcomes."""
    parts = []
    for outcome in (Outcome.APPEARS, Outcome.DOES_NOT_APPEAR, Outcome.INCONCLUSIVE, Outcome.UNDEFINED):
        names = [n for n, o in outcomes.items() if o == outcome]
        if names:
            shown = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
            parts.append(f"{outcome}: {shown} ({len(names)})")
    return "; ".join(parts)


def head_table(found: HeadFindings) -> list[str]:
    """One line per (layer, head): values, effects against the recipient alone, the
    complement's cost (`HeadMap.cost`), the random heads' mean and the outcome."""
    lines = [
        "| layer | head | top-5 | top-5 - recipient [95% CI] | prob - recipient [95% CI] | "
        "complement's cost, top-5 [95% CI] | random heads, top-5 (mean) | above the recipient? |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    grid = found.grid
    costs = {bound: grid.cost("top5", bound) for bound in ("value", "low", "high")}
    for (layer, head), cell in sorted(grid.cells.items()):
        i, j = grid.layers.index(layer), grid.heads.index(head)
        cost = _ci(*(_nan_none(costs[b][i][j]) for b in ("value", "low", "high")), sign=True)
        lines.append(
            f"| {layer} | {head} | {_num(cell.values['top5'].value)} | "
            f"{_shifted(cell.values, 'top5', grid.baseline('recipient', 'top5'))} | "
            f"{_shifted(cell.values, 'prob', grid.baseline('recipient', 'prob'))} | {cost} | "
            f"{_num(random_mean(cell, 'top5'))} | {found.above_recipient[(layer, head)]} |"
        )
    return lines + ["", COST_WORDS]


def _nan_none(value: float) -> float | None:
    return None if value != value else value


def head_sentence(found: HeadFindings) -> str:
    """What the head map shows, by the decision rule against the recipient alone."""
    grid = found.grid
    recipient = grid.refs.get("recipient")
    if recipient is None:
        return f"The map of {grid.components} per head has no recipient-alone row to compare with."
    outcomes = {f"L{layer} h{head}": outcome for (layer, head), outcome in found.above_recipient.items()}
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


def curve_table(found: CurveFindings, against_words: str) -> list[str]:
    """One line per point (value and interval on each metric, outcome against a reference),
    then its random controls and the references."""
    curve = found.curve
    label = "rank" if curve.kind == "rank" else "lambda"
    lines = [
        f"| {label} | " + " | ".join(f"{METRIC_WORDS[m]} [95% CI]" for m in DECISION_METRICS) + f" | {against_words} |",
        "|---|" + "---:|" * len(DECISION_METRICS) + "---|",
    ]
    for x, point, outcome in zip(curve.xs, curve.points, found.outcomes):
        cells = " | ".join(
            _ci(point.values[m].value, point.values[m].low, point.values[m].high) for m in DECISION_METRICS
        )
        verdict = "(the reference)" if outcome is None else outcome
        lines.append(f"| {_x(x)} | {cells} | {verdict} |")
    for x, point in zip(curve.xs, curve.points):
        lines += _control_lines(point, x)
    return lines + _ref_lines(curve)


def _x(x) -> str:
    return x if isinstance(x, str) else f"{x:g}"


def rank_sentence(found: CurveFindings) -> str:
    """Which ranks reach the whole change's value, by the decision rule."""
    curve = found.curve
    if found.against is None:
        return f"The {curve.series} rank curve has no full-rank point to compare with."
    outcomes = {f"rank {_x(x)}": o for x, o in zip(curve.xs, found.outcomes) if o is not None}
    reached = [name for name, o in outcomes.items() if o == Outcome.APPEARS]
    lowest = f"the lowest rank that does is {reached[0]}" if reached else "no rank below full does by the rule"
    return (
        f"Does the {curve.series} change truncated to rank k reach the whole change's top-5 and probability "
        f"(the point's whole 95% interval at or above the full-rank value)? {_grouped(outcomes)}; {lowest}."
    )


def dose_sentence(found: CurveFindings) -> str:
    """Which doses lie above the recipient alone, and whether lambda = 1 beats its controls."""
    curve, recipient = found.curve, found.against
    if recipient is None:
        return f"The {curve.series} dose curve has no recipient-alone row to compare with."
    outcomes = {f"lambda {_x(x)}": o for x, o in zip(curve.xs, found.outcomes)}
    text = (
        f"Which doses of the {curve.series} change lift top-5 and probability above the recipient alone "
        f"(`{recipient['top5'].condition}`)? {_grouped(outcomes)}."
    )
    if found.beats_controls is not None:
        text += f" At lambda = 1 against its random controls' mean: {found.beats_controls}."
    return text


def experiment_finer(findings: FinerFindings) -> list[str]:
    """The finer tables and sentences of one experiment (nothing when it has no finer rows)."""
    lines: list[str] = []
    for found in findings.heads:
        grid = found.grid
        lines += [f"### {grid.components} per head (layer x head)", "", EXTENSION_NOTE, "", head_sentence(found), ""]
        lines += head_table(found) + [""]
    for found in findings.ranks:
        lines += [f"### {found.curve.series} by rank of the change", "", EXTENSION_NOTE, "", rank_sentence(found), ""]
        lines += curve_table(found, "reaches full?") + [""]
    for found in findings.doses:
        lines += [f"### {found.curve.series} dose-response", "", EXTENSION_NOTE, "", dose_sentence(found), ""]
        lines += curve_table(found, "above the recipient?") + [""]
    return lines
