"""The run report's section for `localize` experiments, read from their localize.json files.

It lives with the report (it reads results and never runs a model); the search that writes those
files is `weightgraft.attribution` (`attribution.experiment.run_localize`); both use the file's
one schema, `reporting.localize_results.LocalizeSummary`.
"""

from __future__ import annotations

from weightgraft.reporting.localize_results import LocalizeSummary
from weightgraft.reporting.numbers import with_interval


def localize_section(localizations: dict[str, LocalizeSummary]) -> list[str]:
    """Markdown for every finished localize experiment of a run, by name (none: no lines)."""
    lines: list[str] = []
    for name in sorted(localizations):
        s, rel = localizations[name], f"localize/{name}"
        lines += [
            f"## Minimal graft: {name}",
            "",
            f"{s.examples} prompts; groups (role x layer x component) ranked by {s.method} "
            f"attribution, grafted top-1, top-2, ... exactly until the set recovers "
            f"{s.target_recovery:.0%} of SFT's gain over PRE on {' and '.join(s.stop_on)}.",
            "",
        ]
        lines += _found(s) + _agreement(s)
        lines += [
            f"![recovery]({rel}/recovery.png)",
            "",
            f"![heatmaps]({rel}/heatmaps.png)",
            "",
            f"![positions]({rel}/positions.png)",
            "",
            f"Tokens coloured by what their grafts carry: [{rel}/tokens.html]({rel}/tokens.html).",
            "",
            *[f"_{note}_" for note in s.notes],
            "",
        ]
    return lines


def _found(s: LocalizeSummary) -> list[str]:
    """The minimal set beside a random set of its size and FE+LT, or that none was reached."""
    felt, counts = s.baselines["FE+LT"], s.counts
    if not s.reached:
        return [
            f"No top-k set reached the target. FE+LT recovers {felt['recovery_top5']:.0%} (top-5), "
            f"{felt['recovery_prob']:.0%} (prob).",
            "",
        ]
    chosen = ", ".join(f"{c.role}/{'model' if c.layer is None else 'L' + str(c.layer)}/{c.component}" for c in s.chosen)
    rec, rand = s.recovery, s.random_recovery_same_size
    return [
        "| set | groups | cells per prompt | recovery top-5 | recovery prob |",
        "| --- | --- | --- | --- | --- |",
        f"| minimal (attribution order) | {counts.chosen_groups} | {counts.chosen_cells_per_prompt:.1f} "
        f"| {_with_interval(rec['top5'], s, 'chosen', 'top5')} | {_with_interval(rec['prob'], s, 'chosen', 'prob')} |",
        f"| random order, same size | {counts.chosen_groups} | | {_with_interval(rand['top5'], s, 'random', 'top5')} "
        f"| {_with_interval(rand['prob'], s, 'random', 'prob')} |",
        f"| FE+LT, every layer and component | {counts.fe_lt_groups} | {counts.fe_lt_cells_per_prompt:.1f} "
        f"| {_with_interval(felt['recovery_top5'], s, 'FE+LT', 'top5')} "
        f"| {_with_interval(felt['recovery_prob'], s, 'FE+LT', 'prob')} |",
        "",
        f"The minimal set: {chosen}.",
        "",
    ]


def _agreement(s: LocalizeSummary) -> list[str]:
    """How well attribution agreed with exact single-cell effects, where that was checked."""
    agreement = s.agreement
    if not agreement:
        return []
    return [
        f"On {agreement['examples']} prompts, {agreement['cells']} FE and LT cells grafted one at a "
        f"time: Spearman with the exact effect {agreement.get('spearman_gradient', float('nan')):.2f} "
        f"(gradient), {agreement.get('spearman_integrated', float('nan')):.2f} (integrated).",
        "",
    ]


def _with_interval(value: float, summary: LocalizeSummary, name: str, metric: str) -> str:
    interval = summary.intervals.get(name, {}).get(metric)
    bounds = (interval.low, interval.high) if interval and interval.defined else (None, None)
    return with_interval(value, *bounds, as_percent=True)
