"""The reproduce job's report: what was built (steps, hashes, times) and, per analysis, a
"paper vs this run" table of top-5 accuracy per evaluation sentence.

The per-run reports (`runs/<group>/report.md`, written by the runner) keep the full tables with
intervals and plots; this one sets the run's numbers beside the published ones.
"""

from __future__ import annotations

import csv
from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.pipelines.estimate import PAPER_MODELS, paper_model_name

SENTENCES = {"1": "paper_1", "2": "paper_2", "3": "paper_3"}
# Our experiment -> the published analysis it reproduces.
ANALYSIS_OF = {"position_grafting": "position", "position_relation": "position",
               "position_title": "position", "components_reversal": "components_reversal",
               "components_pre": "components_pre", "hybrid": "hybrid"}


def published_rows() -> list[dict]:
    """The paper's published figures (a copy of the authors' numbers shipped beside this file)."""
    with open(Path(__file__).with_name("published_numbers.csv"), newline="") as handle:
        return list(csv.DictReader(handle))


def _ours(summary: list[dict], experiment: str) -> dict[tuple[str, str], float | None]:
    return {(r["condition"], r["template"]): r["value"] for r in summary
            if r["experiment"] == experiment and r["metric"] == "top5"}


def _fmt(value) -> str:
    return "–" if value is None else f"{float(value):.2f}"


def comparison_table(summary: list[dict], state: dict, published: list[dict], analysis: str,
                     dataset: str, paper_model: str | None) -> str:
    """Markdown: one row per condition; per sentence the published top-5 beside this run's."""
    ours = _ours(summary, state["name"])
    paper: dict[tuple[str, str, str], float] = {}
    older = False
    for row in published:
        if row["analysis"] == analysis and row["dataset"] == dataset and row["metric"] == "top5":
            sentence = row["eval_sentence"]
            if sentence == "1-old":  # the authors' earlier wording of sentence 1
                sentence, older = "1", True
            paper[(row["model"], sentence, row["condition"])] = float(row["value"])
    sentences = [s for s, t in SENTENCES.items() if t in state["templates"]]
    models = [paper_model] if paper_model else list(PAPER_MODELS)
    head, rule = ["condition"], ["---"]
    for s in sentences:
        for model in models:
            head.append(f"paper s{s} ({model})")
            rule.append("---:")
        head.append(f"this run s{s}")
        rule.append("---:")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    for cond in state["conditions"]:
        cells = [cond["name"]]
        for s in sentences:
            cells += [_fmt(paper.get((m, s, cond["name"]))) for m in models]
            cells.append(_fmt(ours.get((cond["name"], SENTENCES[s]))))
        lines.append("| " + " | ".join(cells) + " |")
    if older:
        lines.append("\nThe published s1 numbers of this analysis used the authors' older wording "
                     "of sentence 1.")
    return "\n".join(lines)


def write_reproduce_report(job, ledger_body: dict) -> Path:
    from weightgraft.experiments.config import parse_config
    from weightgraft.experiments.records import read_state
    from weightgraft.reporting.summary import read_summary

    out = Path(job.options.out)
    paper_model = paper_model_name(job.options.model)
    published = published_rows()
    lines = [f"# weightgraft reproduce: {job.options.model}", ""]
    lines.append(f"Published numbers: {paper_model or 'none for this model; all four paper models shown'}. "
                 "Top-5 accuracy of the target's first token; s1, s2, s3 are the paper's "
                 "evaluation sentences (`paper_1..3`); – means no published number or not run.")
    lines += ["", "## Steps", "", "| step | seconds | inputs sha256 |", "|---|---:|---|"]
    for name, record in ledger_body["steps"].items():
        lines.append(f"| {name} | {record['seconds']} | `{record['inputs_sha256'][:16]}` |")
    for note in job.notes:
        lines.append(f"\nNote: {note}")
    for group in job.runs.values():
        summary = read_summary(group.out)
        code = job.options.datasets[0] if group.name.endswith("_hybrid") else group.name
        config = parse_config(ledger_body["steps"][f"run:{group.name}"]["inputs"]["config"])
        for experiment in config.expanded():
            state = read_state(group.out, experiment.name)
            analysis = ANALYSIS_OF.get(state["name"])
            lines += ["", f"## {state['title']} ({group.name})", ""]
            if analysis is None:
                lines.append(f"No published numbers for this analysis; full table in "
                             f"[runs/{group.name}/report.md](runs/{group.name}/report.md).")
                continue
            dataset = f"{code}_B" if analysis == "hybrid" else code
            lines.append(f"Paper vs this run, {analysis} on {dataset} "
                         f"([full table](runs/{group.name}/report.md)):")
            lines += ["", comparison_table(summary, state, published, analysis, dataset, paper_model)]
    return write_text_atomic(out / "report.md", "\n".join(lines) + "\n")
