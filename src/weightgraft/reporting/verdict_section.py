"""The report's verdict section: the claims' table (recovery on each metric with its interval,
outcome, facts to settle), one line per claim with its notes, what each claim means and the rule
that decided it, and the paired tests of the pairwise claims. It reads the `Verdict` and the
`RunSummary`; the decision itself is `reporting.decision`'s."""

from __future__ import annotations

from weightgraft.experiments.vocabulary import METRIC_WORDS, SAME_IN_BOTH
from weightgraft.reporting.decision import Outcome
from weightgraft.reporting.numbers import with_interval
from weightgraft.reporting.safe_html import escape_text
from weightgraft.reporting.study_contract import Study
from weightgraft.reporting.summary import ComparisonRow, RunSummary, SummaryRow
from weightgraft.reporting.verdict import MIN_GAP, Check, Verdict, definition_of


def verdict_table(checks: list[Check]) -> list[str]:
    """One row per claim decided by intervals: recovery on each metric, outcome, facts."""
    decided = [c for c in checks if c.by_intervals]
    if not decided:
        return []
    metrics = list(decided[0].decisions)
    lines = [
        "| claim | outcome | "
        + " | ".join(f"recovery, {METRIC_WORDS.get(m, m)} [95% CI]" for m in metrics)
        + " | claimed | facts | facts to settle |",
        "|---|---|" + "---:|" * len(metrics) + "---|---:|---:|",
    ]
    for check in decided:
        d = check.decisions[metrics[0]]
        word = ">=" if d.direction == "at_least" else "<="
        needed = [
            x.facts_needed
            for x in check.decisions.values()
            if x.outcome == Outcome.INCONCLUSIVE and x.facts_needed is not None
        ]
        lines.append(
            f"| {check.name} | {check.outcome} | "
            + " | ".join(check.decisions[m].interval() for m in metrics)
            + f" | {word} {d.threshold:.2f} | {d.n_facts} | "
            + (f"~{max(needed):,}" if needed else "")
            + " |"
        )
    return lines


def paired_tests_table(comparisons: list[ComparisonRow]) -> list[str]:
    """Paired tests of the pairwise claims: difference with its interval, d_z, p-value."""
    if not comparisons:
        return []
    lines = [
        "| comparison (A vs B) | metric | A - B [95% CI] | d_z | p (sign-flip over facts) | facts | prompts |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in comparisons:
        p = r.p_value
        p_text = "n/a" if p is None else (f"{p:.2g}" + (" (exact)" if r.exact else ""))
        d_z = "n/a" if r.effect_size is None else f"{r.effect_size:.2f}"
        lines.append(
            f"| {escape_text(r.a)} vs {escape_text(r.b)} (`{r.experiment}`) | "
            f"{METRIC_WORDS.get(r.metric, r.metric)} | "
            f"{with_interval(r.difference, r.ci_low, r.ci_high, digits=3, missing='undefined')} | {d_z} | "
            f"{p_text} | {r.n_facts} | {r.n} |"
        )
    return lines


def _setting(summary: list[SummaryRow], check: Check) -> str:
    """In which definition a claim was decided, from its condition's label."""
    label = definition_of(summary, check.claim.experiment, check.claim.condition)
    if label in ("authors", SAME_IN_BOTH):
        extra = " (the clean definition computes it alike)" if label == SAME_IN_BOTH else ""
        return f"Decided on the authors' definition, the paper's own setting{extra}."
    if label == "clean":
        return "Decided on the clean definition: this run has no authors' rows for it (`fidelity: clean`)."
    return ""


def _check_notes(check: Check, summary: RunSummary, clean_check: Check | None, study: Study) -> list[str]:
    """The lines under a claim: its setting, a different clean outcome, the missing part."""
    notes = [_setting(summary.rows, check)] if check.claim else []
    if clean_check is not None:
        if clean_check.by_intervals:
            value = next(iter(clean_check.decisions.values())).interval()
        else:
            value = "undefined" if clean_check.recovery is None else f"{clean_check.recovery:.2f}"
        verb = "is inconclusive" if clean_check.outcome == Outcome.INCONCLUSIVE else clean_check.outcome
        notes.append(
            f"In the clean definition (`{clean_check.claim.condition}`) it {verb} instead: recovery {value} on top-5."
        )
    missing = study.explain(check, summary.recoveries)
    if missing:
        notes.append(f"What this run's rows show: {missing}")
    return [n for n in notes if n]


def verdict_section(summary: RunSummary, verdict: Verdict, study: Study) -> list[str]:
    """The verdict's table, one line per claim with its notes, what each claim means and the
    rule that decided it, then the paired tests; nothing when no claim could be decided."""
    checks = verdict.checks
    if not checks:
        return []
    lines = [f"## {study.verdict_title}", ""]
    table = verdict_table(checks)
    if table:
        lines += table + [""]
    for check in checks:
        lines.append(f"- **{check.name}: {check.outcome}.** {check.sentence}")
        lines += [f"  - {line}" for line in _check_notes(check, summary, verdict.clean.get(check.name), study)]
    lines += [
        "",
        "Each claim: recovery = (condition - low) / (high - low) over every "
        "template of its experiment, against a threshold:",
        "",
    ]
    for check in checks:
        c = check.claim
        word = ">=" if c.direction == "at_least" else "<="
        lines.append(
            f"- {c.name}: {c.meaning}; recovery of `{c.condition}` between "
            f"`{c.low}` (0) and `{c.high}` (1) {word} {c.threshold:.0%}."
        )
    return lines + _rule_words(bool(table)) + _paired_tests_block(summary.comparisons)


def _rule_words(by_intervals: bool) -> list[str]:
    """How the claims above were decided, in words."""
    if not by_intervals:
        return [
            "",
            f"A reference gap under {MIN_GAP:.2f} is inconclusive. Point estimates "
            "only: read the intervals in the tables below.",
            "",
        ]
    return [
        "",
        "A claim appears when the recovery's whole 95% interval is on the claimed "
        "side of the threshold, does not appear when it is wholly on the other side, "
        "and is inconclusive when it straddles the threshold, when top-5 and "
        "probability disagree, or when the recovery is undefined (the reference gap's "
        "interval includes 0, or the gap is negative: no gain to share out). Intervals resample facts (all prompts of a fact "
        "together), one resample set per experiment shared by all its conditions. "
        "'Facts to settle': the interval half-width scaled by sqrt(n/n') until it "
        "clears the threshold, the estimate held fixed.",
        "",
    ]


def _paired_tests_block(comparisons: list[ComparisonRow]) -> list[str]:
    """The paired tests' table with its legend (nothing without tests)."""
    tests = paired_tests_table(comparisons)
    if not tests:
        return []
    return [
        "### Paired tests of the pairwise claims",
        "",
        *tests,
        "",
        "d_z: the mean of per-fact mean differences over their standard deviation. "
        "p: two-sided sign-flip permutation test over facts (each fact's difference keeps "
        "or flips its sign under the null).",
        "",
    ]
