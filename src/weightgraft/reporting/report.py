"""report.md and report.html: the verdict on the paper's pattern, one section per experiment
(description, table with 95% intervals, per-template table, plots, not-applicable notes), and
provenance (models with hashes, datasets with manifests, seed, versions, time taken)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.reporting.plots import plot_experiment
from weightgraft.reporting.summary import ALL, read_comparisons, read_recovery, read_summary
from weightgraft.reporting.verdict import METRIC_WORDS, MIN_GAP, check_pattern

TABLE_METRICS = ["top1", "top5", "top10", "top50", "top100", "prob", "target_logprob",
                 "exact_match"]
CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;
padding:3px 7px;text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
img{max-width:100%}code{background:#f5f5f5;padding:1px 3px}pre{background:#f5f5f5;padding:8px;
overflow-x:auto;font-size:12px}"""


def _cell(row: dict | None, ci: bool = True) -> str:
    if row is None or row["value"] is None:
        return "n/a"
    if not ci:
        return f"{row['value']:.3f}"
    return f"{row['value']:.3f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def experiment_table(summary: list[dict], state: dict, metrics: list[str] | None = None,
                     ci: bool = True) -> str:
    """Markdown table of one experiment over all templates: condition x metric (value [CI])."""
    metrics = metrics or TABLE_METRICS
    rows = {(r["condition"], r["metric"]): r for r in summary
            if r["experiment"] == state["name"] and r["template"] == ALL}
    lines = ["| condition | n | " + " | ".join(metrics) + " |",
             "|---|---:|" + "---:|" * len(metrics)]
    for cond in state["conditions"]:
        first = rows.get((cond["name"], metrics[0]))
        n = first["n"] if first else 0
        if first and first.get("n_facts") is not None:
            n = f"{n} ({first['n_facts']} facts)"
        cells = [_cell(rows.get((cond["name"], m)), ci) for m in metrics]
        lines.append(f"| {cond['name']} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def template_table(summary: list[dict], state: dict) -> str:
    metric = state["headline"][0]
    rows = {(r["condition"], r["template"]): r for r in summary
            if r["experiment"] == state["name"] and r["metric"] == metric}
    templates = [*state["templates"], ALL]
    lines = [f"| condition ({metric}) | " + " | ".join(templates) + " |",
             "|---|" + "---:|" * len(templates)]
    for cond in state["conditions"]:
        cells = []
        for t in templates:
            row = rows.get((cond["name"], t))
            cells.append("n/a (n=0)" if row is None or row["value"] is None
                         else f"{row['value']:.2f} (n={row['n']})")
        lines.append(f"| {cond['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def na_notes(summary: list[dict], state: dict) -> list[str]:
    notes = []
    metric = state["headline"][0]
    for cond in state["conditions"]:
        missing = [r["template"] for r in summary if r["experiment"] == state["name"]
                   and r["condition"] == cond["name"] and r["metric"] == metric
                   and r["template"] != ALL and r["n"] == 0]
        if missing:
            notes.append(f"`{cond['name']}` is not applicable to template(s) {', '.join(missing)} "
                         "(a role it names is absent there): reported as n/a with n=0; its ALL "
                         "value covers the other templates only.")
    return notes


def _conditions_legend(state: dict) -> str:
    lines = []
    for cond in state["conditions"]:
        if cond["meta"]:
            continue
        where = f"; recipient `{cond['recipient']}`, donor `{cond['donor']}`"
        lines.append(f"- **{cond['name']}**: {cond['description'] or 'custom grafts'}{where}")
    sweep = [c for c in state["conditions"] if c["meta"]]
    if sweep:
        lines.append(f"- plus {len(sweep)} sweep conditions `POSITION BAND COMPONENTS` "
                     f"({sweep[0]['description']}, ...)")
    return "\n".join(lines)


def _interval(value, low, high, digits: int = 2) -> str:
    if value is None:
        return "undefined"
    if low is None or high is None:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def verdict_table(checks) -> list[str]:
    """One row per claim decided by intervals: recovery on each metric, outcome, facts."""
    decided = [c for c in checks if c.decisions]
    if not decided:
        return []
    metrics = list(decided[0].decisions)
    lines = ["| claim | outcome | " + " | ".join(f"recovery, {METRIC_WORDS.get(m, m)} [95% CI]"
                                                for m in metrics)
             + " | claimed | facts | facts to settle |",
             "|---|---|" + "---:|" * len(metrics) + "---|---:|---:|"]
    for check in decided:
        d = check.decisions[metrics[0]]
        word = ">=" if d.direction == "at_least" else "<="
        needed = [x.facts_needed for x in check.decisions.values()
                  if x.outcome == "inconclusive" and x.facts_needed is not None]
        lines.append(f"| {check.name} | {check.outcome} | "
                     + " | ".join(check.decisions[m].interval() for m in metrics)
                     + f" | {word} {d.threshold:.2f} | {d.n_facts} | "
                     + (f"~{max(needed)}" if needed else "") + " |")
    return lines


def comparison_table(comparisons: list[dict]) -> list[str]:
    """Paired tests of the pairwise claims: difference with its interval, d_z, p-value."""
    if not comparisons:
        return []
    lines = ["| comparison (A vs B) | metric | A - B [95% CI] | d_z | p (sign-flip over facts) "
             "| facts | prompts |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in comparisons:
        p = r["p_value"]
        p_text = "n/a" if p is None else (f"{p:.2g}" + (" (exact)" if r["exact"] else ""))
        d_z = "n/a" if r["effect_size"] is None else f"{r['effect_size']:.2f}"
        lines.append(f"| {r['a']} vs {r['b']} (`{r['experiment']}`) | "
                     f"{METRIC_WORDS.get(r['metric'], r['metric'])} | "
                     f"{_interval(r['difference'], r['ci_low'], r['ci_high'], 3)} | {d_z} | "
                     f"{p_text} | {r['n_facts']} | {r['n']} |")
    return lines


def recovery_tables(recovery: list[dict], name: str) -> list[str]:
    """Per reference pair of an experiment: every condition's recovery over all templates."""
    rows = [r for r in recovery if r["experiment"] == name and r["template"] == ALL]
    lines = []
    for base, full in dict.fromkeys((r["base"], r["full"]) for r in rows):
        pair = [r for r in rows if (r["base"], r["full"]) == (base, full)]
        metrics = list(dict.fromkeys(r["metric"] for r in pair))
        cells = {(r["condition"], r["metric"]): r for r in pair}
        lines += ['<details markdown="1"><summary>Recovery between '
                  f"{html.escape(base)} and {html.escape(full)}</summary>", "",
                  f"Recovery (C - {base}) / ({full} - {base}) over every template, 95% "
                  "intervals over facts (`recovery.csv`; undefined where the gap's interval "
                  "includes 0):", "",
                  "| condition | " + " | ".join(METRIC_WORDS.get(m, m) for m in metrics) + " |",
                  "|---|" + "---:|" * len(metrics)]
        for cond in dict.fromkeys(r["condition"] for r in pair):
            lines.append(f"| {cond} | " + " | ".join(
                _interval(c["recovery"], c["ci_low"], c["ci_high"]) if c["defined"]
                else "undefined" for c in (cells[(cond, m)] for m in metrics)) + " |")
        lines += ["", "</details>", ""]
    return lines


def verdict_section(summary: list[dict], recovery: list[dict] | None = None,
                    comparisons: list[dict] | None = None) -> list[str]:
    checks = check_pattern(summary, recovery)
    if not checks:
        return []
    lines = ["## Does the paper's pattern appear?", ""]
    table = verdict_table(checks)
    if table:
        lines += table + [""]
    for check in checks:
        lines.append(f"- **{check.name}: {check.outcome}.** {check.sentence}")
    lines += ["", "Each claim: recovery = (condition - low) / (high - low) over every "
              "template of its experiment, against a threshold:", ""]
    for check in checks:
        c = check.claim
        word = ">=" if c.direction == "at_least" else "<="
        lines.append(f"- {c.name}: {c.meaning}; recovery of `{c.condition}` between "
                     f"`{c.low}` (0) and `{c.high}` (1) {word} {c.threshold:.0%}.")
    if table:
        lines += ["", "A claim appears when the recovery's whole 95% interval is on the claimed "
                  "side of the threshold, does not appear when it is wholly on the other side, "
                  "and is inconclusive when it straddles the threshold, when top-5 and "
                  "probability disagree, or when the recovery is undefined (the reference gap's "
                  "interval includes 0). Intervals resample facts (all prompts of a fact "
                  "together), one resample set per experiment shared by all its conditions. "
                  "'Facts to settle': the interval half-width scaled by sqrt(n/n') until it "
                  "clears the threshold, the estimate held fixed.", ""]
    else:
        lines += ["", f"A reference gap under {MIN_GAP:.2f} is inconclusive. Point estimates "
                  "only: read the intervals in the tables below.", ""]
    tests = comparison_table(comparisons or [])
    if tests:
        lines += ["### Paired tests of the pairwise claims", ""] + tests + [
            "", "d_z: the mean of per-fact mean differences over their standard deviation. "
            "p: two-sided sign-flip permutation test over facts (each fact's difference keeps "
            "or flips its sign under the null).", ""]
    return lines


def _provenance(run: dict) -> list[str]:
    lines = ["## Provenance", "", "| model | path | sha256 |", "|---|---|---|"]
    for key, info in run["models"].items():
        lines.append(f"| {key} | `{info['path']}` | `{info['sha256'][:16]}...` |")
    lines += ["", "| dataset | path | manifest |", "|---|---|---|"]
    for key, info in run["datasets"].items():
        manifest = info["manifest"]
        brief = {k: manifest[k] for k in list(manifest)[:6]}
        lines.append(f"| {key} | `{info['path']}` | `{json.dumps(brief, default=str)[:160]}` |")
    total = sum(s["seconds"] for s in run.get("sessions", []))
    lines += ["", f"- seed: {run['seed']}; device: {run['device']}; dtype: {run['dtype']}",
              "- versions: " + ", ".join(f"{k} {v}" for k, v in run["versions"].items()),
              f"- time taken: {total:.1f} s of computation over {len(run.get('sessions', []))} "
              "session(s): " + "; ".join(f"{s['started']} {s['seconds']} s ({s['computed']} "
                                         f"conditions computed, {s['reused']} reused)"
                                         for s in run.get("sessions", [])),
              "", "<details markdown=\"1\"><summary>Dataset manifests and full config</summary>", "",
              "```json", json.dumps({"datasets": run["datasets"], "config": run["config"]},
                                    indent=1, default=str)[:20000], "```", "", "</details>", ""]
    return lines


def build_markdown(out: Path, plots: dict[str, list[Path]]) -> str:
    run = json.loads((out / "run.json").read_text())
    summary = read_summary(out)
    recovery = read_recovery(out)
    names = list(dict.fromkeys(r["experiment"] for r in summary))
    lines = [f"# weightgraft report: {run['config']['name']}", "",
             "Accuracy is top-k of the target's first token; `prob` its probability; "
             "`target_logprob` the whole target's log-probability; `exact_match` greedy decoding "
             "of the whole target. Values over every template, with 95% intervals from a bootstrap "
             "over facts (n: prompts, with the number of facts); `summary.csv` has every metric "
             "per template, `recovery.csv` every condition's recovery, `comparisons.csv` the "
             "paired tests.", ""]
    lines += verdict_section(summary, recovery, read_comparisons(out))
    for name in names:
        state = json.loads((out / "state" / f"{name}.json").read_text())
        lines += [f"## {state['title']}", "", state["description"], "",
                  f"Experiment `{name}`: recipient `{state['recipient']}`, donor "
                  f"`{state['donor']}`, dataset `{state['dataset']}`, "
                  f"{len(state['examples'])} prompts over {len(state['templates'])} templates"
                  + (f" (a seeded subset of {state['available_examples']}, balanced over "
                     "templates)" if state.get("available_examples", 0) > len(state["examples"])
                     else "") + ".", ""]
        for path in plots.get(name, []):
            if path.suffix == ".png":
                lines += [f"![{path.stem}](plots/{path.name})", ""]
        lines += [experiment_table(summary, state), "", template_table(summary, state), ""]
        lines += recovery_tables(recovery, name)
        lines += [f"- {note}" for note in na_notes(summary, state)]
        lines += ["", '<details markdown="1"><summary>Conditions</summary>', "",
                  _conditions_legend(state), "", "</details>", ""]
    lines += _provenance(run)
    return "\n".join(lines)


def write_report(out: str | Path) -> tuple[Path, Path]:
    """Plots, report.md and report.html for a run folder that has its summary.csv."""
    import markdown

    out = Path(out)
    summary = read_summary(out)
    plots = {}
    for name in dict.fromkeys(r["experiment"] for r in summary):
        state = json.loads((out / "state" / f"{name}.json").read_text())
        plots[name] = plot_experiment(summary, state, out / "plots")
    text = build_markdown(out, plots)
    md_path = write_text_atomic(out / "report.md", text)
    body = markdown.markdown(text, extensions=["tables", "fenced_code", "md_in_html"])
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>"
            f"{html.escape(out.name)}</title><style>{CSS}</style></head><body>{body}</body></html>")
    html_path = write_text_atomic(out / "report.html", page)
    return md_path, html_path
