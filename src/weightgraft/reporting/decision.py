"""The one rule that decides a claim: from an interval, not from a point estimate.

A claim says a statistic (usually a recovery ratio) lies on one side of a threshold. It
*appears* when its whole interval is on the claimed side, *does not appear* when its whole
interval is on the other side, and is *inconclusive* when the interval straddles the threshold.
For an inconclusive claim we estimate how many facts would likely settle it: interval widths
shrink like 1/sqrt(facts), so with the point estimate held fixed, the half-width h (on the side
facing the threshold) at n facts becomes h * sqrt(n / n'), which clears a threshold at distance
d once n' >= n * (h / d)**2.

A run without intervals (`bootstrap: 0`) is decided by the same rule on the degenerate interval
[value, value]: it appears exactly when the point estimate is on the claimed side
(`weightgraft.reporting.verdict` gathers the evidence; this module only decides).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from weightgraft.reporting.numbers import with_interval


class Outcome(StrEnum):
    """What a claim's evidence says. A str, so that it prints and compares as its words."""

    APPEARS = "appears"
    DOES_NOT_APPEAR = "does not appear"
    INCONCLUSIVE = "inconclusive"
    UNDEFINED = "undefined"  # a metric's evidence is missing (a claim with no defined metric is inconclusive)


DIRECTIONS = ("at_least", "at_most")
# Beyond this many times the facts at hand, "more facts" is no practical way to settle a claim:
# the note says the estimate sits close to the threshold instead of only quoting a number.
IMPRACTICAL_FACTOR = 20


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    value: float
    low: float
    high: float
    threshold: float
    direction: str
    n_facts: int
    facts_needed: int | None = None  # inconclusive only: facts that would likely settle it

    def interval(self, digits: int = 2) -> str:
        if self.outcome == Outcome.UNDEFINED:
            return "undefined"
        return with_interval(self.value, self.low, self.high, digits=digits)

    def settle_note(self) -> str:
        if self.outcome != Outcome.INCONCLUSIVE:
            return ""
        if self.facts_needed is None:
            return "the estimate sits on the threshold: more facts alone would not settle it"
        if self.facts_needed > IMPRACTICAL_FACTOR * self.n_facts:
            return (
                f"the estimate sits close to the threshold: about {self.facts_needed:,} facts "
                f"(now {self.n_facts}, {self.facts_needed / self.n_facts:.0f} times as many) would be needed to settle it"
            )
        return f"about {self.facts_needed:,} facts (now {self.n_facts}) would likely settle it"


def facts_to_settle(value: float, low: float, high: float, threshold: float, n_facts: int) -> int | None:
    """Facts at which the interval would likely clear the threshold, or None when the point
    estimate is on the threshold (no sample size settles it)."""
    distance = abs(value - threshold)
    if distance == 0 or n_facts <= 0 or not all(map(math.isfinite, (value, low, high))):
        return None
    half = (value - low) if value > threshold else (high - value)
    needed = n_facts * (half / distance) ** 2
    return max(n_facts + 1, math.ceil(needed - 1e-9))  # 1e-9: 224.99999... is 225


def decide(value: float, low: float, high: float, threshold: float, direction: str, n_facts: int) -> Decision:
    """The outcome of a claim `statistic >= threshold` (direction "at_least") or
    `statistic <= threshold` ("at_most") from its interval [low, high]."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, not {direction!r}")
    if not all(map(math.isfinite, (value, low, high))):
        return Decision(Outcome.UNDEFINED, value, low, high, threshold, direction, n_facts)
    if low > high:
        raise ValueError(f"interval [{low}, {high}] has its bounds the wrong way round")
    claimed = low >= threshold if direction == "at_least" else high <= threshold
    other = high < threshold if direction == "at_least" else low > threshold
    if claimed:
        return Decision(Outcome.APPEARS, value, low, high, threshold, direction, n_facts)
    if other:
        return Decision(Outcome.DOES_NOT_APPEAR, value, low, high, threshold, direction, n_facts)
    return Decision(
        Outcome.INCONCLUSIVE,
        value,
        low,
        high,
        threshold,
        direction,
        n_facts,
        facts_to_settle(value, low, high, threshold, n_facts),
    )


def combine(decisions: dict[str, Decision]) -> tuple[Outcome, str]:
    """One outcome for a claim judged on several metrics (e.g. top-5 and probability): their
    common outcome when they agree, else "inconclusive" with a note that says where they
    disagree. Undefined metrics are left out (and named) when others are defined."""
    defined = {m: d for m, d in decisions.items() if d.outcome != Outcome.UNDEFINED}
    skipped = [m for m in decisions if m not in defined]
    note = f" ({', '.join(skipped)} undefined)" if skipped and defined else ""
    if not defined:
        return Outcome.UNDEFINED, "undefined on every metric"
    outcomes = {d.outcome for d in defined.values()}
    if len(defined) == 1:
        return outcomes.pop(), f"decided on {next(iter(defined))} alone{note}"
    if len(outcomes) == 1:
        return outcomes.pop(), f"{' and '.join(defined)} agree{note}"
    parts = ", ".join(f"{m}: {d.outcome}" for m, d in defined.items())
    return Outcome.INCONCLUSIVE, f"metrics disagree ({parts}){note}"
