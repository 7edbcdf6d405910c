"""Does the paper's pattern appear? Each claim is a small record; one rule decides them all.

A claim names an experiment, the condition it is about and two reference conditions: `low`
(recovery 0) and `high` (recovery 1). Its recovery is

    recovery = (value(condition) - value(low)) / (value(high) - value(low))

on top-5 accuracy over every template of the experiment (`ALL`), and the claim holds when the
recovery is at least (`direction="at_least"`) or at most (`"at_most"`) its threshold. A claim is
inconclusive when the reference gap is under MIN_GAP (nothing to share out), and left out when
its experiment or one of its conditions was not run.

The decision rule is `decide`; a statistical rule (intervals instead of point estimates) can
replace it without touching the claims.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from weightgraft.experiments.vocabulary import HEADLINE_METRIC

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


# The paper's claims, in the paper's settings (conditions.md): position grafting onto PRE, and
# component grafting at LT onto the one-direction (B2A) model.
PAPER_CLAIMS = (
    Claim("FE+LT vs SFT", "position_grafting", "FE+LT", "PRE", "SFT", 0.8, "at_least",
          "grafting only the first entity and the last token recovers SFT"),
    Claim("(FE+LT)^C vs PRE", "position_grafting", "(FE+LT)^C", "PRE", "SFT", 0.2, "at_most",
          "grafting every position except FE and LT stays near PRE"),
    Claim("O+FFN vs ATTN+O+FFN", "components_reversal", "O+FFN", "B2A", "ATTN+O+FFN", 0.8,
          "at_least", "at the last token (fourth quarter), O and FFN recover what ATTN+O+FFN "
          "adds to the one-direction model"),
    Claim("FFN vs O+FFN (removing O)", "components_reversal", "FFN", "B2A", "O+FFN", 0.8,
          "at_most", "removing O costs: FFN alone at LT recovers clearly less than O+FFN"),
)


def summary_value(summary: list[dict], experiment: str, condition: str, template: str = ALL,
                  metric: str = METRIC, fact_kind: str = ALL) -> float | None:
    for row in summary:
        if (row["experiment"], row["condition"], row["template"], row["metric"],
                row.get("fact_kind", ALL)) == (experiment, condition, template, metric, fact_kind):
            return row["value"]
    return None


def decide(claim: Claim, summary: list[dict]) -> Check | None:
    """The point-estimate rule: recovery against the claim's threshold."""
    values = {c: summary_value(summary, claim.experiment, c)
              for c in (claim.low, claim.high, claim.condition)}
    if any(v is None for v in values.values()):
        return None
    low, high, value = values[claim.low], values[claim.high], values[claim.condition]
    nums = (f"(top-5 in `{claim.experiment}`: {claim.low} {low:.2f}, {claim.high} {high:.2f}, "
            f"{claim.condition} {value:.2f})")
    gap = high - low
    if gap < MIN_GAP:
        return Check(claim.name, "inconclusive",
                     f"{claim.high} gains only {gap:.2f} over {claim.low}, too little to share "
                     f"out {nums}.", claim)
    recovery = (value - low) / gap
    holds = recovery >= claim.threshold if claim.direction == "at_least" else recovery <= claim.threshold
    sign = (">=" if holds else "<") if claim.direction == "at_least" else ("<=" if holds else ">")
    points = f"; {claim.high} - {claim.condition} = {high - value:+.2f} top-5"
    return Check(claim.name, "appears" if holds else "does not appear",
                 f"{claim.condition} recovers {recovery:.0%} of {claim.high}'s gain over "
                 f"{claim.low} ({sign} {claim.threshold:.0%}{points}) {nums}.", claim, recovery)


def check_pattern(summary: list[dict], claims=PAPER_CLAIMS) -> list[Check]:
    """Every claim whose experiment and conditions are in the summary, decided."""
    return [check for claim in claims if (check := decide(claim, summary)) is not None]
