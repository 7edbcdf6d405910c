"""The run report's section for `localize` experiments, read from their localize.json files.

It lives with the report (it reads results and never runs a model); the search that writes those
files is `weightgraft.attribution` (`attribution.experiment.run_localize`).
"""

from __future__ import annotations

import json
from pathlib import Path


def localize_section(out: str | Path) -> list[str]:
    """Markdown for every finished localize experiment of a run folder (none: no lines)."""
    lines: list[str] = []
    for summary_path in sorted(Path(out).glob("localize/*/localize.json")):
        s = json.loads(summary_path.read_text())
        name, rel = summary_path.parent.name, f"localize/{summary_path.parent.name}"
        base, counts = s["baselines"], s["counts"]
        lines += [
            f"## Minimal graft: {name}",
            "",
            f"{s['examples']} prompts; groups (role x layer x component) ranked by {s['method']} "
            f"attribution, grafted top-1, top-2, ... exactly until the set recovers "
            f"{s['target_recovery']:.0%} of SFT's gain over PRE on {' and '.join(s.get('stop_on', ['top5', 'prob']))}.",
            "",
        ]
        felt = base["FE+LT"]
        if s["reached"]:
            chosen = ", ".join(
                f"{c['role']}/{'model' if c['layer'] is None else 'L' + str(c['layer'])}/{c['component']}"
                for c in s["chosen"]
            )
            rec, rand = s["recovery"], s["random_recovery_same_size"]
            lines += [
                "| set | groups | cells per prompt | recovery top-5 | recovery prob |",
                "| --- | --- | --- | --- | --- |",
                f"| minimal (attribution order) | {counts['chosen_groups']} | {counts['chosen_cells_per_prompt']:.1f} "
                f"| {_with_interval(rec['top5'], s, 'chosen', 'top5')} | {_with_interval(rec['prob'], s, 'chosen', 'prob')} |",
                f"| random order, same size | {counts['chosen_groups']} | | {_with_interval(rand['top5'], s, 'random', 'top5')} "
                f"| {_with_interval(rand['prob'], s, 'random', 'prob')} |",
                f"| FE+LT, every layer and component | {counts['fe_lt_groups']} | {counts['fe_lt_cells_per_prompt']:.1f} "
                f"| {_with_interval(felt['recovery_top5'], s, 'FE+LT', 'top5')} "
                f"| {_with_interval(felt['recovery_prob'], s, 'FE+LT', 'prob')} |",
                "",
                f"The minimal set: {chosen}.",
                "",
            ]
        else:
            lines += [
                f"No top-k set reached the target. FE+LT recovers {felt['recovery_top5']:.0%} (top-5), "
                f"{felt['recovery_prob']:.0%} (prob).",
                "",
            ]
        agreement = s.get("agreement") or {}
        if agreement:
            lines += [
                f"On {agreement['examples']} prompts, {agreement['cells']} FE and LT cells grafted one at a "
                f"time: Spearman with the exact effect {agreement.get('spearman_gradient', float('nan')):.2f} "
                f"(gradient), {agreement.get('spearman_integrated', float('nan')):.2f} (integrated).",
                "",
            ]
        lines += [
            f"![recovery]({rel}/recovery.png)",
            "",
            f"![heatmaps]({rel}/heatmaps.png)",
            "",
            f"![positions]({rel}/positions.png)",
            "",
            f"Tokens coloured by what their grafts carry: [{rel}/tokens.html]({rel}/tokens.html).",
            "",
            *[f"_{note}_" for note in s.get("notes", [])],
            "",
        ]
    return lines


def _with_interval(value: float, summary: dict, name: str, metric: str) -> str:
    interval = (summary.get("intervals") or {}).get(name, {}).get(metric)
    if interval and interval.get("defined"):
        return f"{value:.0%} [{interval['low']:.0%}, {interval['high']:.0%}]"
    return f"{value:.0%}"
