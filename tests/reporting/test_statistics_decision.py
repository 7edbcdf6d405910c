"""Claims decided by intervals: each side of the threshold, across it, and how many facts would
likely settle an inconclusive one."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from weightgraft.paper.claims import PAPER_CLAIMS
from weightgraft.reporting.decision import Outcome, combine, decide, facts_to_settle
from weightgraft.reporting.summary import RecoveryRow, RunSummary
from weightgraft.reporting.verdict import check_pattern

APPEARS, DOES_NOT_APPEAR = Outcome.APPEARS, Outcome.DOES_NOT_APPEAR
INCONCLUSIVE, UNDEFINED = Outcome.INCONCLUSIVE, Outcome.UNDEFINED


@pytest.mark.parametrize(
    "value, low, high, direction, outcome",
    [
        (0.95, 0.85, 1.02, "at_least", APPEARS),  # whole interval above 0.8
        (0.90, 0.80, 0.97, "at_least", APPEARS),  # touching the threshold counts
        (0.50, 0.35, 0.70, "at_least", DOES_NOT_APPEAR),  # whole interval below
        (0.85, 0.70, 0.95, "at_least", INCONCLUSIVE),  # across
        (0.10, -0.05, 0.30, "at_most", INCONCLUSIVE),  # across, claim "stays under"
        (0.50, 0.30, 0.79, "at_most", APPEARS),
        (0.95, 0.85, 1.02, "at_most", DOES_NOT_APPEAR),
    ],
)
def test_outcome_follows_the_whole_interval(value, low, high, direction, outcome):
    threshold = 0.8 if (direction == "at_least" or value > 0.4) else 0.2
    assert decide(value, low, high, threshold, direction, 100).outcome == outcome


def test_facts_needed_scales_the_half_width_by_sqrt_n():
    # point 0.9, lower half-width 0.15 at 100 facts, threshold 0.8 at distance 0.1:
    # 0.15 * sqrt(100 / n) = 0.1  =>  n = 100 * 1.5**2 = 225
    d = decide(0.9, 0.75, 0.97, 0.8, "at_least", 100)
    assert d.outcome == INCONCLUSIVE and d.facts_needed == 225
    assert "225 facts (now 100)" in d.settle_note()
    # below the threshold the upper half-width counts: 0.2 * sqrt(40 / n) = 0.05 => n = 640
    assert facts_to_settle(0.75, 0.7, 0.95, 0.8, 40) == 640
    # far more facts than are at hand: said plainly, not only as a number
    d = decide(0.805, 0.6, 1.0, 0.8, "at_least", 50)
    assert d.facts_needed == 50 * 41**2
    assert d.settle_note() == (
        "the estimate sits close to the threshold: about 84,050 facts (now 50, 1681 times as many) "
        "would be needed to settle it"
    )
    # a point on the threshold cannot be settled by more facts
    d = decide(0.8, 0.7, 0.9, 0.8, "at_least", 50)
    assert d.facts_needed is None and "on the threshold" in d.settle_note()
    # settled claims need nothing
    assert decide(0.95, 0.85, 1.0, 0.8, "at_least", 100).facts_needed is None


def test_undefined_and_bad_input():
    assert decide(math.nan, math.nan, math.nan, 0.8, "at_least", 30).outcome == UNDEFINED
    with pytest.raises(ValueError, match="direction"):
        decide(0.5, 0.4, 0.6, 0.8, "above", 30)
    with pytest.raises(ValueError, match="wrong way round"):
        decide(0.5, 0.6, 0.4, 0.8, "at_least", 30)


def test_metrics_agree_or_the_disagreement_is_named():
    top5 = decide(0.95, 0.85, 1.0, 0.8, "at_least", 100)
    prob = decide(0.90, 0.82, 0.99, 0.8, "at_least", 100)
    low_prob = decide(0.40, 0.30, 0.55, 0.8, "at_least", 100)
    undefined = decide(math.nan, math.nan, math.nan, 0.8, "at_least", 100)
    assert combine({"top5": top5, "prob": prob}) == (APPEARS, "top5 and prob agree")
    outcome, note = combine({"top5": top5, "prob": low_prob})
    assert outcome == INCONCLUSIVE
    assert note == "metrics disagree (top5: appears, prob: does not appear)"
    outcome, note = combine({"top5": top5, "prob": undefined})
    assert (outcome, note) == (APPEARS, "decided on top5 alone (prob undefined)")
    assert combine({"top5": undefined})[0] == UNDEFINED


def _recovery_row(condition, low, high, metric, value, ci, n_facts=60, defined=True):
    return RecoveryRow(
        experiment="position_grafting",
        condition=condition,
        template="ALL",
        fact_kind="ALL",
        metric=metric,
        base=low,
        full=high,
        recovery=value if defined else None,
        ci_low=ci[0] if defined else None,
        ci_high=ci[1] if defined else None,
        gap=0.9 if defined else 0.01,
        gap_low=0.8 if defined else -0.02,
        gap_high=0.95 if defined else 0.04,
        defined=defined,
        n=n_facts * 14,
        n_facts=n_facts,
    )


def test_verdict_decides_paper_claims_by_recovery_intervals():
    rows = [
        _recovery_row("FE+LT", "PRE", "SFT", "top5", 0.9, (0.75, 0.97)),
        _recovery_row("FE+LT", "PRE", "SFT", "prob", 0.92, (0.85, 0.99)),
        _recovery_row("(FE+LT)^C", "PRE", "SFT", "top5", 0.05, (-0.02, 0.12)),
        _recovery_row("(FE+LT)^C", "PRE", "SFT", "prob", 0.40, (0.30, 0.55)),
    ]
    fe_lt, complement = check_pattern(RunSummary([], rows), PAPER_CLAIMS).checks
    # top-5 straddles 0.8, probability is above it: inconclusive, with the facts to settle
    assert fe_lt.outcome == INCONCLUSIVE
    assert fe_lt.decisions["top5"].facts_needed == 135  # 60 * (0.15 / 0.1)**2
    assert "metrics disagree (top5: inconclusive, prob: appears)" in fe_lt.sentence
    assert "0.90 [0.75, 0.97] on top-5" in fe_lt.sentence and "60 facts, 840 prompts" in fe_lt.sentence
    # top-5 says it stays near PRE, probability says it does not: the disagreement is named
    assert complement.outcome == INCONCLUSIVE
    assert "top5: appears, prob: does not appear" in complement.sentence
    agree = [_recovery_row("FE+LT", "PRE", "SFT", m, 0.95, (0.85, 1.0)) for m in ("top5", "prob")]
    assert check_pattern(RunSummary([], agree), PAPER_CLAIMS).checks[0].outcome == APPEARS
    flat = [_recovery_row("FE+LT", "PRE", "SFT", m, 0, (0, 0), defined=False) for m in ("top5", "prob")]
    check = check_pattern(RunSummary([], flat), PAPER_CLAIMS).checks[0]
    assert check.outcome == INCONCLUSIVE and "includes 0" in check.sentence


def test_verdict_treats_a_negative_reference_gap_as_no_gain():
    rows = [
        replace(_recovery_row("FE+LT", "PRE", "SFT", m, 0.9, (0.85, 0.95)), gap=-0.3, gap_low=-0.4, gap_high=-0.2)
        for m in ("top5", "prob")
    ]  # SFT clearly below PRE
    check = check_pattern(RunSummary([], rows), PAPER_CLAIMS).checks[0]
    assert check.outcome == INCONCLUSIVE and "is below 0: no gain" in check.sentence
