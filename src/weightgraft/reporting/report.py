"""report.md and report.html: the verdict on the paper's pattern, one section per experiment
(description, table with 95% intervals, per-template table, plots, not-applicable notes), and
provenance (models with hashes, datasets with manifests, seed, versions, time taken)."""

from __future__ import annotations

import html
import json
from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.reporting.plots import plot_experiment
from weightgraft.reporting.summary import ALL, read_summary
from weightgraft.reporting.verdict import MIN_GAP, check_pattern

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


def verdict_section(summary: list[dict]) -> list[str]:
    checks = check_pattern(summary)
    if not checks:
        return []
    lines = ["## Does the paper's pattern appear?", ""]
    for check in checks:
        lines.append(f"- **{check.name}: {check.outcome}.** {check.sentence}")
    lines += ["", "Each claim: recovery = (condition - low) / (high - low) on top-5 over every "
              "template of its experiment, against a threshold:", ""]
    for check in checks:
        c = check.claim
        word = ">=" if c.direction == "at_least" else "<="
        lines.append(f"- {c.name}: {c.meaning}; recovery of `{c.condition}` between "
                     f"`{c.low}` (0) and `{c.high}` (1) {word} {c.threshold:.0%}.")
    lines += ["", f"A reference gap under {MIN_GAP:.2f} is inconclusive. Point estimates only: "
              "read the intervals in the tables below.", ""]
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
    names = list(dict.fromkeys(r["experiment"] for r in summary))
    lines = [f"# weightgraft report: {run['config']['name']}", "",
             "Accuracy is top-k of the target's first token; `prob` its probability; "
             "`target_logprob` the whole target's log-probability; `exact_match` greedy decoding "
             "of the whole target. Values over every template, with bootstrap 95% intervals; "
             "`summary.csv` has every metric per template.", ""]
    lines += verdict_section(summary)
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
