"""What a caller asks a run's summary to decide: claims (a recovery against a threshold) and the
pairs of conditions to compare by paired tests.

This module holds the types only. A paper's own claims are defined by the paper's layer and
passed in (`ClaimSet`), so that the summary and the verdict know no paper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# A paired comparison of two conditions of one experiment: (experiment, condition a, condition b).
ComparedPair = tuple[str, str, str]


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


@dataclass(frozen=True)
class ClaimSet:
    """The claims to decide and the pairs to test; both empty: a plain summary, no verdict.

    claims: each adds its (low, high) reference pair to its experiment's recovery rows and is
        decided on them.
    pairs: (experiment, a, b), each tested a against b (paired over facts) in comparisons.csv.
    """

    claims: tuple[Claim, ...] = ()
    pairs: tuple[ComparedPair, ...] = ()
