"""The paper's claims (arXiv 2506.20746), as records that `weightgraft.reporting.verdict`
decides on a run's summary, and the paired tests of its pairwise claims that the summary writes
to comparisons.csv. The generic summary and verdict know no paper: the caller passes these in.
"""

from __future__ import annotations

from weightgraft.reporting.claim_types import Claim

# The paper's claims, in the paper's settings (conditions.md): position grafting onto PRE, and
# component grafting at LT onto the one-direction (B2A) model.
PAPER_CLAIMS = (
    Claim(
        "FE+LT vs SFT",
        "position_grafting",
        "FE+LT",
        "PRE",
        "SFT",
        0.8,
        "at_least",
        "grafting only the first entity and the last token recovers SFT",
    ),
    Claim(
        "(FE+LT)^C vs PRE",
        "position_grafting",
        "(FE+LT)^C",
        "PRE",
        "SFT",
        0.2,
        "at_most",
        "grafting every position except FE and LT stays near PRE",
    ),
    Claim(
        "O+FFN vs ATTN+O+FFN",
        "components_reversal",
        "O+FFN",
        "B2A",
        "ATTN+O+FFN",
        0.8,
        "at_least",
        "at the last token (fourth quarter), O and FFN recover what ATTN+O+FFN adds to the one-direction model",
    ),
    Claim(
        "FFN vs O+FFN (removing O)",
        "components_reversal",
        "FFN",
        "B2A",
        "O+FFN",
        0.8,
        "at_most",
        "removing O costs: FFN alone at LT recovers clearly less than O+FFN",
    ),
)


# The pairwise claims' paired tests (condition a against b, over the same facts and prompts).
PAIRED_TESTS = (
    ("position_grafting", "FE+LT", "SFT"),
    ("components_reversal", "O+FFN", "ATTN+O+FFN"),
    ("components_reversal", "FFN", "O+FFN"),
)
