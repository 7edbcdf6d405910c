"""The paper as a `Study`: what it adds to every run's summary and report (its claims, the
paired tests of its pairwise claims, what a missing part's rows say, the `paper vs this model`
tables and the deviations). `weightgraft.pipelines` passes it to the generic reporting layer.
"""

from __future__ import annotations

from weightgraft.paper.claims import PAIRED_TESTS, PAPER_CLAIMS
from weightgraft.paper.missing_part import missing_part
from weightgraft.paper.report_sections import deviations_section, paper_tables
from weightgraft.reporting.claim_types import ClaimSet
from weightgraft.reporting.study_contract import Study

PAPER = Study(
    asked=ClaimSet(PAPER_CLAIMS, PAIRED_TESTS),
    explain=missing_part,
    experiment_section=paper_tables,
    deviations=deviations_section,
    verdict_title="Does the paper's pattern appear?",
)
