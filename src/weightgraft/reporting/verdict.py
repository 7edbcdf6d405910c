"""Does a pattern appear? Each claim is a small record (`reporting.claims.Claim`, given by the
caller); one rule (`reporting.decision.decide`) decides them all on the run's `RunSummary`.

A claim names an experiment, the condition it is about and two reference conditions: `low`
(recovery 0) and `high` (recovery 1). Its recovery is

    recovery = (value(condition) - value(low)) / (value(high) - value(low))

over every template of the experiment (`ALL`), and the claim holds when the recovery is at
least (`direction="at_least"`) or at most (`"at_most"`) its threshold. A claim is left out when
its experiment or one of its conditions was not run.

Claims are decided on the rows under their plain names: in the paper presets' default
(`fidelity: both`) and in `fidelity: authors` those are the authors' definitions, the paper's own
setting. Where the run has clean rows (`NAME [clean]`) that change a claim's outcome, the
verdict holds their checks too (`Verdict.clean`).

The evidence, by what the summary holds:
- recoveries (recovery.csv, a run with intervals): the recovery's 95% interval over facts on
  top-5 and on probability; each must have its whole interval on one side of the threshold, and
  the two must agree; otherwise the claim is inconclusive and the check says how many facts would
  likely settle it, or where the metrics disagree. A recovery is undefined when its reference
  gap's interval includes zero, and a claim counts it undefined too when the gap is negative (the
  reference is worse: no gain).
- point estimates only (`bootstrap: 0`): top-5's recovery as the interval [r, r]; a claim whose
  reference gap is under MIN_GAP is inconclusive (nothing to share out).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from weightgraft.experiments.vocabulary import CLEAN_SUFFIX, DECISION_METRICS, HEADLINE_METRIC, METRIC_WORDS
from weightgraft.reporting.claim_types import Claim
from weightgraft.reporting.decision import Decision, Outcome, combine, decide
from weightgraft.reporting.numbers import with_interval
from weightgraft.reporting.statistics import ALL
from weightgraft.reporting.summary import RecoveryRow, RunSummary, SummaryRow

# On point estimates alone (no interval says whether the references differ at all), a claim needs
# its references' top-5 at least this far apart: a recovery divides by their gap, and under 0.10 a
# change of 0.01 in the condition's top-5 (one prompt in a hundred) moves it by more than 0.1.
MIN_GAP = 0.10


@dataclass
class Check:
    """A claim decided: its outcome, the sentence that says why, and the decisions per metric
    (`by_intervals`: from recoveries' intervals, else from point estimates)."""

    name: str
    outcome: Outcome
    sentence: str
    claim: Claim | None = None
    recovery: float | None = None
    decisions: dict[str, Decision] = field(default_factory=dict)  # metric -> decision
    by_intervals: bool = False


@dataclass
class Verdict:
    """Every claim that the run could decide, in the claims' order, and for those whose outcome
    differs on the clean rows, that check (claim name -> check)."""

    checks: list[Check]
    clean: dict[str, Check] = field(default_factory=dict)


def summary_row(
    rows: list[SummaryRow],
    experiment: str,
    condition: str,
    template: str = ALL,
    metric: str = HEADLINE_METRIC,
    fact_kind: str = ALL,
) -> SummaryRow | None:
    """The summary row of one condition, group and metric, or None when the run has none."""
    for row in rows:
        if (row.experiment, row.condition, row.template, row.metric, row.fact_kind) == (
            experiment,
            condition,
            template,
            metric,
            fact_kind,
        ):
            return row
    return None


def by_points(claim: Claim, rows: list[SummaryRow]) -> Check | None:
    """The claim on top-5's point estimates: its recovery decided as the interval [r, r]."""
    found = {c: summary_row(rows, claim.experiment, c) for c in (claim.low, claim.high, claim.condition)}
    if any(r is None or r.value is None for r in found.values()):
        return None
    low, high, value = (found[c].value for c in (claim.low, claim.high, claim.condition))
    nums = (
        f"(top-5 in `{claim.experiment}`: {claim.low} {low:.2f}, {claim.high} {high:.2f}, "
        f"{claim.condition} {value:.2f})"
    )
    gap = high - low
    if gap < MIN_GAP:
        return Check(
            claim.name,
            Outcome.INCONCLUSIVE,
            f"{claim.high} gains only {gap:.2f} over {claim.low}, too little to share out {nums}.",
            claim,
        )
    recovery = (value - low) / gap
    point = decide(recovery, recovery, recovery, claim.threshold, claim.direction, found[claim.condition].n_facts or 0)
    holds = point.outcome == Outcome.APPEARS
    sign = (">=" if holds else "<") if claim.direction == "at_least" else ("<=" if holds else ">")
    points = f"; {claim.high} - {claim.condition} = {high - value:+.2f} top-5"
    return Check(
        claim.name,
        point.outcome,
        f"{claim.condition} recovers {recovery:.0%} of {claim.high}'s gain over "
        f"{claim.low} ({sign} {claim.threshold:.0%}{points}) {nums}.",
        claim,
        recovery,
        {HEADLINE_METRIC: point},
    )


def _recovery_rows(claim: Claim, recoveries: list[RecoveryRow]) -> dict[str, RecoveryRow]:
    """Metric -> the claim's recovery row over every template and fact kind."""
    return {
        r.metric: r
        for r in recoveries
        if (r.experiment, r.condition, r.template, r.fact_kind, r.base, r.full)
        == (claim.experiment, claim.condition, ALL, ALL, claim.low, claim.high)
    }


def _interval_decision(claim: Claim, r: RecoveryRow) -> Decision:
    """One metric's recovery interval decided; a gap wholly below 0 (the reference is worse)
    has no gain to share out, so its recovery counts as undefined."""
    nan = float("nan")
    shared = r.defined and (r.gap or 0) > 0
    value, low, high = (r.recovery, r.ci_low, r.ci_high) if shared else (nan, nan, nan)
    return decide(value, low, high, claim.threshold, claim.direction, r.n_facts or 0)


def _interval_words(claim: Claim, d: Decision, r: RecoveryRow, metric: str) -> str:
    """What one metric's interval says, for the check's sentence."""
    word_metric = METRIC_WORDS.get(metric, metric)
    if d.outcome != Outcome.UNDEFINED:
        text = f"{d.interval()} on {word_metric}"
    elif None in (r.gap, r.gap_low, r.gap_high):
        text = f"undefined on {word_metric} (a reference value is missing)"
    else:
        why = "includes 0" if r.gap_low <= 0 <= r.gap_high else "is below 0: no gain"
        text = (
            f"undefined on {word_metric} ({claim.high} - {claim.low} = "
            f"{with_interval(r.gap, r.gap_low, r.gap_high, digits=3)} {why})"
        )
    if d.outcome == Outcome.INCONCLUSIVE:
        text += f"; {d.settle_note()}"
    return text


def by_intervals(claim: Claim, recoveries: list[RecoveryRow]) -> Check | None:
    """The claim on its recovery intervals on top-5 and probability (see the module's docstring)."""
    rows = _recovery_rows(claim, recoveries)
    if not all(m in rows for m in DECISION_METRICS):
        return None
    decisions = {metric: _interval_decision(claim, rows[metric]) for metric in DECISION_METRICS}
    outcome, note = combine(decisions)
    parts = [_interval_words(claim, d, rows[metric], metric) for metric, d in decisions.items()]
    word = ">=" if claim.direction == "at_least" else "<="
    first = rows[DECISION_METRICS[0]]
    sentence = (
        f"Recovery of {claim.condition} between {claim.low} (0) and {claim.high} (1): "
        f"{'; '.join(parts)} (claim: {word} {claim.threshold:.2f}; 95% intervals over "
        f"{first.n_facts} facts, {first.n} prompts, in `{claim.experiment}`); "
        f"{note}."
    )
    if outcome == Outcome.UNDEFINED:
        outcome = Outcome.INCONCLUSIVE
    top = decisions[DECISION_METRICS[0]]
    recovery = None if top.outcome == Outcome.UNDEFINED else top.value
    return Check(claim.name, outcome, sentence, claim, recovery, decisions, by_intervals=True)


def check_claim(claim: Claim, summary: RunSummary) -> Check | None:
    """The claim decided on the summary's recoveries when it has any (a run with intervals),
    else on its point estimates; None when the run lacks its experiment or conditions."""
    if summary.recoveries:
        return by_intervals(claim, summary.recoveries)
    return by_points(claim, summary.rows)


def definition_of(rows: list[SummaryRow], experiment: str, condition: str) -> str:
    """The fidelity label of a condition's rows in the summary ("" when unlabelled)."""
    for row in rows:
        if row.experiment == experiment and row.condition == condition:
            return row.fidelity or ""
    return ""


def clean_claim(claim: Claim, rows: list[SummaryRow]) -> Claim | None:
    """The claim on the clean rows: each of its conditions replaced by its clean twin where the
    run has one; None when none has (the clean definition computes the claim alike)."""
    present = {r.condition for r in rows if r.experiment == claim.experiment}
    twin = {c: c + CLEAN_SUFFIX for c in (claim.condition, claim.low, claim.high) if c + CLEAN_SUFFIX in present}
    if not twin:
        return None
    return replace(
        claim,
        condition=twin.get(claim.condition, claim.condition),
        low=twin.get(claim.low, claim.low),
        high=twin.get(claim.high, claim.high),
    )


def clean_differences(checks: list[Check], summary: RunSummary) -> dict[str, Check]:
    """Claim name -> the check on the clean rows, for the claims whose outcome differs there."""
    out = {}
    for check in checks:
        claim = clean_claim(check.claim, summary.rows) if check.claim else None
        if claim is None:
            continue
        other = check_claim(claim, summary)
        if other is not None and other.outcome != check.outcome:
            out[check.name] = other
    return out


def check_pattern(summary: RunSummary, claims: tuple[Claim, ...]) -> Verdict:
    """Every claim whose experiment and conditions are in the summary, decided (by intervals
    when the summary has recoveries, else by point estimates), with the clean rows' checks
    where they differ. `claims` come from the caller (a paper's claims, or a user's)."""
    checks = [check for claim in claims if (check := check_claim(claim, summary)) is not None]
    return Verdict(checks, clean_differences(checks, summary))
