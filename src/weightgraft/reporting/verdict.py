"""Does the paper's pattern appear? Each claim is a small record; one rule decides them all.

A claim names an experiment, the condition it is about and two reference conditions: `low`
(recovery 0) and `high` (recovery 1). Its recovery is

    recovery = (value(condition) - value(low)) / (value(high) - value(low))

on top-5 accuracy over every template of the experiment (`ALL`), and the claim holds when the
recovery is at least (`direction="at_least"`) or at most (`"at_most"`) its threshold. A claim is
inconclusive when the reference gap is under MIN_GAP (nothing to share out), and left out when
its experiment or one of its conditions was not run.

Claims are decided on the rows under their plain names: in the paper presets' default
(`fidelity: both`) and in `fidelity: authors` those are the authors' definitions, the paper's own
setting. Where the run has clean rows (`NAME [clean]`) that change a claim's outcome,
`clean_differences` says so.

With recovery.csv (written beside summary.csv) a claim is decided by its recovery's 95% interval
over facts (`weightgraft.reporting.decision`): on top-5 and on probability, each must have its
whole interval on one side of the threshold, and the two must agree; otherwise the claim is
inconclusive and the check says how many facts would likely settle it, or where the metrics
disagree. A recovery is undefined when its reference gap's interval includes zero, and a claim
counts it undefined too when the gap is negative (the reference is worse: no gain). Without
recovery rows (a summary alone) the point-estimate rule `decide` below applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from weightgraft.experiments.vocabulary import HEADLINE_METRIC
from weightgraft.reporting import decision

METRIC = HEADLINE_METRIC  # top-5, the paper's headline
MIN_GAP = 0.10
ALL = "ALL"


@dataclass(frozen=True)
class Claim:
    name: str
    experiment: str
    condition: str
    low: str  # reference condition whose value counts as recovery 0
    high: str  # reference condition whose value counts as recovery 1
    threshold: float
    direction: Literal["at_least", "at_most"]
    meaning: str  # the claim in words, for the report


@dataclass
class Check:
    name: str
    outcome: str  # "appears", "does not appear", "inconclusive"
    sentence: str
    claim: Claim | None = None
    recovery: float | None = None
    decisions: dict[str, decision.Decision] = field(default_factory=dict)  # metric -> decision


INTERVAL_METRICS = ("top5", "prob")
METRIC_WORDS = {"top5": "top-5", "prob": "probability", "top1": "top-1", "target_logprob": "target log-probability"}


def summary_value(
    summary: list[dict],
    experiment: str,
    condition: str,
    template: str = ALL,
    metric: str = METRIC,
    fact_kind: str = ALL,
) -> float | None:
    for row in summary:
        if (row["experiment"], row["condition"], row["template"], row["metric"], row.get("fact_kind", ALL)) == (
            experiment,
            condition,
            template,
            metric,
            fact_kind,
        ):
            return row["value"]
    return None


def decide(claim: Claim, summary: list[dict]) -> Check | None:
    """The point-estimate rule: recovery against the claim's threshold."""
    values = {c: summary_value(summary, claim.experiment, c) for c in (claim.low, claim.high, claim.condition)}
    if any(v is None for v in values.values()):
        return None
    low, high, value = values[claim.low], values[claim.high], values[claim.condition]
    nums = (
        f"(top-5 in `{claim.experiment}`: {claim.low} {low:.2f}, {claim.high} {high:.2f}, "
        f"{claim.condition} {value:.2f})"
    )
    gap = high - low
    if gap < MIN_GAP:
        return Check(
            claim.name,
            "inconclusive",
            f"{claim.high} gains only {gap:.2f} over {claim.low}, too little to share out {nums}.",
            claim,
        )
    recovery = (value - low) / gap
    holds = recovery >= claim.threshold if claim.direction == "at_least" else recovery <= claim.threshold
    sign = (">=" if holds else "<") if claim.direction == "at_least" else ("<=" if holds else ">")
    points = f"; {claim.high} - {claim.condition} = {high - value:+.2f} top-5"
    return Check(
        claim.name,
        "appears" if holds else "does not appear",
        f"{claim.condition} recovers {recovery:.0%} of {claim.high}'s gain over "
        f"{claim.low} ({sign} {claim.threshold:.0%}{points}) {nums}.",
        claim,
        recovery,
    )


def decide_by_intervals(claim: Claim, recovery: list[dict]) -> Check | None:
    """The interval rule on top-5 and probability (see the module's docstring)."""
    rows = {
        r["metric"]: r
        for r in recovery
        if (r["experiment"], r["condition"], r["template"], r.get("fact_kind", ALL), r["base"], r["full"])
        == (claim.experiment, claim.condition, ALL, ALL, claim.low, claim.high)
    }
    if not all(m in rows for m in INTERVAL_METRICS):
        return None
    decisions = {}
    for metric in INTERVAL_METRICS:
        r = rows[metric]
        nan = float("nan")
        # A claim shares out a gain: a gap wholly below 0 (the reference is worse) has none.
        value, low, high = (
            (r["recovery"], r["ci_low"], r["ci_high"]) if r["defined"] and (r["gap"] or 0) > 0 else (nan, nan, nan)
        )
        decisions[metric] = decision.decide(value, low, high, claim.threshold, claim.direction, r["n_facts"] or 0)
    outcome, note = decision.combine(decisions)
    word = ">=" if claim.direction == "at_least" else "<="
    parts = []
    for metric, d in decisions.items():
        r = rows[metric]
        word_metric = METRIC_WORDS.get(metric, metric)
        if d.outcome != decision.UNDEFINED:
            text = f"{d.interval()} on {word_metric}"
        elif None in (r["gap"], r["gap_low"], r["gap_high"]):
            text = f"undefined on {word_metric} (a reference value is missing)"
        else:
            why = "includes 0" if r["gap_low"] <= 0 <= r["gap_high"] else "is below 0: no gain"
            text = (
                f"undefined on {word_metric} ({claim.high} - {claim.low} = {r['gap']:.3f} "
                f"[{r['gap_low']:.3f}, {r['gap_high']:.3f}] {why})"
            )
        if d.outcome == decision.INCONCLUSIVE:
            text += f"; {d.settle_note()}"
        parts.append(text)
    first = rows[INTERVAL_METRICS[0]]
    sentence = (
        f"Recovery of {claim.condition} between {claim.low} (0) and {claim.high} (1): "
        f"{'; '.join(parts)} (claim: {word} {claim.threshold:.2f}; 95% intervals over "
        f"{first['n_facts']} facts, {first['n']} prompts, in `{claim.experiment}`); "
        f"{note}."
    )
    if outcome == decision.UNDEFINED:
        outcome = "inconclusive"
    top = decisions[INTERVAL_METRICS[0]]
    return Check(
        claim.name, outcome, sentence, claim, None if top.outcome == decision.UNDEFINED else top.value, decisions
    )


CLEAN_SUFFIX = " [clean]"  # experiments.vocabulary's: the clean twin of an authors' row


def definition_of(summary: list[dict], experiment: str, condition: str) -> str:
    """The fidelity label of a condition's rows in the summary ("" when unlabelled)."""
    for row in summary:
        if row["experiment"] == experiment and row["condition"] == condition:
            return row.get("fidelity", "") or ""
    return ""


def clean_claim(claim: Claim, summary: list[dict]) -> Claim | None:
    """The claim on the clean rows: each of its conditions replaced by its clean twin where the
    run has one; None when none has (the clean definition computes the claim alike)."""
    present = {r["condition"] for r in summary if r["experiment"] == claim.experiment}
    twin = {c: c + CLEAN_SUFFIX for c in (claim.condition, claim.low, claim.high) if c + CLEAN_SUFFIX in present}
    if not twin:
        return None
    return replace(
        claim,
        condition=twin.get(claim.condition, claim.condition),
        low=twin.get(claim.low, claim.low),
        high=twin.get(claim.high, claim.high),
    )


def clean_differences(checks: list[Check], summary: list[dict], recovery: list[dict] | None = None) -> dict[str, Check]:
    """Claim name -> the check on the clean rows, for the claims whose outcome differs there."""
    out = {}
    for check in checks:
        claim = clean_claim(check.claim, summary) if check.claim else None
        if claim is None:
            continue
        other = decide_by_intervals(claim, recovery) if recovery else decide(claim, summary)
        if other is not None and other.outcome != check.outcome:
            out[check.name] = other
    return out


def check_pattern(summary: list[dict], recovery: list[dict] | None, claims) -> list[Check]:
    """Every claim of `claims` (the caller's: `weightgraft.paper.claims` holds the paper's) whose
    experiment and conditions are in the summary, decided: by intervals when `recovery` rows
    (recovery.csv) are given, else by point estimates."""
    if recovery:
        return [check for claim in claims if (check := decide_by_intervals(claim, recovery)) is not None]
    return [check for claim in claims if (check := decide(claim, summary)) is not None]
