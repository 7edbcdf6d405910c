"""The reproduce job's report: what was built (steps, input hashes, times) and, per analysis, a
"paper vs this run" table of top-5 accuracy per evaluation sentence.

The published figures and the map from presets to the paper's analyses are
`weightgraft.paper.published`'s. Unlike a single run's report, a job knows which paper
dataset each run group reproduces (FMRA, FMFA, RMRA-shuffled, FMRA_B for the hybrid) and, when
MODEL is one of the paper's four, which published model to set beside it. The per-run reports
(`runs/<group>/report.md`) keep the full tables with intervals, per-kind tables and plots.
"""

from __future__ import annotations

from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.record import ExperimentRecord
from weightgraft.paper.estimate import paper_model_name
from weightgraft.paper.plain_facts import HeldOutKnowledge
from weightgraft.paper.presets import PRESET_NAMES  # noqa: F401  (registers the presets its configs name)
from weightgraft.paper.published import ANALYSIS_OF_EXPERIMENT, MODELS, published
from weightgraft.paper.reproduce_sections import (
    claims_section,
    deviations_section,
    finetune_section,
    plain_facts_section,
)
from weightgraft.reporting.report import split_twins
from weightgraft.reporting.summary import SummaryRow, pooled, read_summary


def _fmt(value) -> str:
    return "–" if value is None else f"{float(value):.2f}"


def paper_vs_run_table(
    summary: list[SummaryRow], record: ExperimentRecord, dataset: str, paper_model: str | None
) -> str:
    """Markdown: one row per condition; per sentence the published top-5 beside this run's row
    in the authors' definition (every fact kind pooled) and, where the run has one, its clean
    row. `paper_model` None: the four published models."""
    analysis = ANALYSIS_OF_EXPERIMENT[record.name]
    ours = {
        (r.condition, r.template): r.value
        for r in pooled(summary)
        if r.experiment == record.name and r.metric == "top5"
    }
    names, label, twins = split_twins(record)
    models = [paper_model] if paper_model else list(MODELS)
    sentences = [(t, s) for t, s in analysis.sentences.items() if t in record.templates]
    head, rule = ["condition", "definition"], ["---", "---"]
    for template, sentence in sentences:
        tag = f"{sentence} (unverified)" if sentence in analysis.unverified else sentence
        head += [f"paper s{tag} {m}" for m in models] + [f"this run `{template}`"]
        rule += ["---:"] * (len(models) + 1)
        if twins:
            head.append(f"clean `{template}`")
            rule.append("---:")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    for name in names:
        cells = [name, label.get(name) or "–"]
        for template, sentence in sentences:
            cells += [_fmt(published(analysis.name, dataset, sentence, name, m)) for m in models]
            cells.append(_fmt(ours.get((name, template))))
            if twins:
                cells.append(_fmt(ours.get((twins[name], template))) if name in twins else "=")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"This run's rows: {record.wording} wording of the paper's sentences."]
    if twins:
        lines.append(
            "`clean`: the clean definition's row where it differs from the authors' (`=`: it grafts the same)."
        )
    if analysis.note:
        lines += ["", f"Published: {analysis.note}."]
    return "\n".join(lines)


def write_reproduce_report(job, ledger_body: dict) -> Path:
    out = Path(job.recipe.out)
    paper_model = paper_model_name(job.recipe.model)
    beside = paper_model or "all four paper models (this model is none of them)"
    intro = (
        f"Published numbers beside this run: {beside}. Top-5 accuracy of the target's first "
        "token, every fact kind pooled; s1, s2, s3 are the paper's evaluation sentences "
        "(`paper_1..3`); – where there is no published number."
    )
    lines = [
        f"# weightgraft reproduce: {job.recipe.model}",
        "",
        intro,
        "",
        "## Steps",
        "",
        "| step | seconds | inputs sha256 |",
        "|---|---:|---|",
    ]
    for name, record in ledger_body["steps"].items():
        if name == "report":  # the step writing this: recorded only after a first report
            continue
        lines.append(f"| {name} | {record['seconds']} | `{record['inputs_sha256'][:16]}` |")
    lines += ["", "Every step's inputs and outputs are in `provenance.json`."]
    lines += [f"\nNote: {note}" for note in job.notes]
    steps = ledger_body["steps"]
    knowledge = steps.get("knowledge")
    lines += ["", *finetune_section(job, steps)]
    lines += ["", *claims_section(job, job.recipe.datasets[0], steps)]
    held_out = HeldOutKnowledge.from_record(knowledge["outputs"]["result"]) if knowledge else None
    lines += ["", *plain_facts_section(held_out)]
    lines += ["", *deviations_section(job, steps)]
    for group in job.runs.values():
        summary = read_summary(group.out)
        hybrid_group = group.name.endswith("_hybrid")
        code = job.recipe.datasets[0] if hybrid_group else group.name
        config = parse_config(ledger_body["steps"][f"run:{group.name}"]["inputs"]["config"])
        for experiment in config.expanded():
            record = ExperimentRecord.read(group.out, experiment.name)
            full = f"[full table](runs/{group.name}/report.md)"
            lines += ["", f"## {record.title} ({group.name})", ""]
            if record.name not in ANALYSIS_OF_EXPERIMENT:
                lines.append(f"No published numbers for this analysis; {full}.")
                continue
            dataset = f"{code}_B" if hybrid_group else code
            analysis = ANALYSIS_OF_EXPERIMENT[record.name].name
            lines += [
                f"Paper vs this run, {analysis} on {dataset} ({full}):",
                "",
                paper_vs_run_table(summary, record, dataset, paper_model),
            ]
    return write_text_atomic(out / "report.md", "\n".join(lines) + "\n")
