"""report.md and report.html: the verdict on a study's claims (the caller's `Study`; the
paper's is `weightgraft.paper.study.PAPER`; its section is `verdict_section.py`'s), the study's deviations, one section per experiment
(description, layers used, plots, table with 95% intervals, per-template and per-fact-kind
tables, the study's own tables such as the paper's published numbers beside this model's,
not-applicable notes, the conditions' grafts), and provenance (models with hashes, datasets with
manifests, seed, versions, time taken). The report decides nothing: it reads the `RunSummary`
and the `Verdict`."""

from __future__ import annotations

import html
import json
from pathlib import Path

import markdown

from weightgraft.atomic import write_text_atomic
from weightgraft.experiments.condition_kind import Plain, SweepCell
from weightgraft.experiments.conditions.components import describe
from weightgraft.experiments.record import ConditionRecord, ExperimentRecord, GraftRecord
from weightgraft.experiments.vocabulary import CLEAN_SUFFIX, METRIC_WORDS, SUMMARY_METRICS
from weightgraft.reporting.finer_section import experiment_finer
from weightgraft.reporting.localize_results import LocalizeSummary
from weightgraft.reporting.localize_section import localize_section
from weightgraft.reporting.numbers import number, with_interval
from weightgraft.reporting.plots import plot_experiment
from weightgraft.reporting.report_model import ExperimentReport, RunReport, bands_used, build_run_report
from weightgraft.reporting.safe_html import escape_text, sanitize
from weightgraft.reporting.statistics import ALL
from weightgraft.reporting.study_contract import Study
from weightgraft.reporting.summary import RecoveryRow, RunSummary, SummaryRow, by_condition, pooled
from weightgraft.reporting.verdict import Verdict
from weightgraft.reporting.verdict_section import verdict_section

CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;
color:#222}table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;
padding:3px 7px;text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}
img{max-width:100%}code{background:#f5f5f5;padding:1px 3px}pre{background:#f5f5f5;padding:8px;
overflow-x:auto;font-size:12px}"""


def _cell(row: SummaryRow | None, ci: bool = True) -> str:
    if row is None:
        return "n/a"
    if not ci:
        return number(row.value)
    return with_interval(row.value, row.ci_low, row.ci_high, digits=3, interval_digits=2)


def experiment_table(summary: list[SummaryRow], record: ExperimentRecord, metrics=None, ci: bool = True) -> str:
    """Markdown table of one experiment over all templates: condition x metric (value [CI])."""
    metrics = list(metrics or SUMMARY_METRICS)
    rows = by_condition(summary, record.name)
    head, rule = _definition_head(record)
    lines = [f"| condition |{head} n | " + " | ".join(metrics) + " |", f"|---|{rule}---:|" + "---:|" * len(metrics)]
    for cond in record.conditions:
        first = rows.get((cond.name, metrics[0]))
        n = first.n if first else 0
        if first and first.n_facts is not None:
            n = f"{n} ({first.n_facts} facts)"
        cells = [_cell(rows.get((cond.name, m)), ci) for m in metrics]
        lines.append(f"| {escape_text(cond.name)} |{_definition_cell(record, cond)} {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def count_cell(row: SummaryRow | None) -> str:
    if row is None or row.value is None:
        return "n/a (n=0)"
    return f"{row.value:.2f} (n={row.n})"


def _definition_head(record: ExperimentRecord) -> tuple[str, str]:
    """The `definition` column's header and rule, for experiments whose rows are labelled."""
    return (" definition |", "---|") if record.labelled else ("", "")


def _definition_cell(record: ExperimentRecord, cond: ConditionRecord) -> str:
    return f" {cond.fidelity} |" if record.labelled else ""


def template_table(summary: list[SummaryRow], record: ExperimentRecord) -> str:
    metric = record.headline[0]
    rows = {(r.condition, r.template): r for r in pooled(summary) if r.experiment == record.name and r.metric == metric}
    templates = [*record.templates, ALL]
    head, rule = _definition_head(record)
    lines = [
        f"| condition ({metric}) |{head} " + " | ".join(templates) + " |",
        f"|---|{rule}" + "---:|" * len(templates),
    ]
    for cond in record.conditions:
        cells = [count_cell(rows.get((cond.name, t))) for t in templates]
        lines.append(f"| {escape_text(cond.name)} |{_definition_cell(record, cond)} " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fact_kind_table(summary: list[SummaryRow], record: ExperimentRecord) -> str:
    """Headline metric per fact kind (every template pooled); empty when kinds are unknown."""
    metric = record.headline[0]
    rows = {
        (r.condition, r.fact_kind): r
        for r in summary
        if r.experiment == record.name and r.metric == metric and r.template == ALL and r.fact_kind != ALL
    }
    kinds = sorted({k for _, k in rows})
    if not kinds:
        return ""
    head, rule = _definition_head(record)
    lines = [
        f"| condition ({metric}, by fact kind) |{head} " + " | ".join(kinds) + " | ALL |",
        f"|---|{rule}" + "---:|" * (len(kinds) + 1),
    ]
    everything = {
        r.condition: r
        for r in pooled(summary)
        if r.experiment == record.name and r.metric == metric and r.template == ALL
    }
    for cond in record.conditions:
        cells = [count_cell(rows.get((cond.name, k))) for k in kinds]
        cells.append(count_cell(everything.get(cond.name)))
        lines.append(f"| {escape_text(cond.name)} |{_definition_cell(record, cond)} " + " | ".join(cells) + " |")
    return "\n".join(lines)


def split_twins(record: ExperimentRecord) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """(the rows without their clean twins, each row's fidelity label, authors' row -> its clean
    twin where the run has one)."""
    names = [c.name for c in record.conditions]
    label = {c.name: c.fidelity for c in record.conditions}
    plain = [n for n in names if not n.endswith(CLEAN_SUFFIX)]
    twins = {n: n + CLEAN_SUFFIX for n in plain if n + CLEAN_SUFFIX in label}
    return plain, label, twins


def _layers_text(indices: tuple[int, ...], num_layers: int) -> str:
    indices = list(indices)
    if indices == list(range(num_layers)):
        return f"all {num_layers} layers"
    if len(indices) == 1:
        return f"layer {indices[0]}"
    if indices and indices == list(range(indices[0], indices[-1] + 1)):
        return f"layers {indices[0]}..{indices[-1]}"
    return "layers " + ", ".join(map(str, indices))


def layers_used(record: ExperimentRecord) -> str:
    """Every named band the experiment's grafts use, with the concrete layers it meant here."""
    return bands_text(bands_used(record), record.num_layers)


def bands_text(bands: dict[str, tuple[int, ...]], num_layers: int) -> str:
    if not bands:
        return ""
    parts = [f"`{band}` = {_layers_text(idx, num_layers)}" for band, idx in bands.items()]
    return f"Layers used (of {num_layers}): " + "; ".join(parts) + "."


def na_notes(missing: dict[str, list[str]]) -> list[str]:
    """One note per condition with templates where none of its prompts applies."""
    return [
        f"`{name}` is not applicable to template(s) {', '.join(templates)} "
        "(a role it names is absent there): reported as n/a with n=0; its ALL "
        "value covers the other templates only."
        for name, templates in missing.items()
    ]


def _graft_text(graft: GraftRecord, num_layers: int) -> str:
    layers = (
        _layers_text(graft.layer_indices, num_layers) if graft.layer_indices is not None else f"layers {graft.layers}"
    )
    return f"{graft.positions}: {describe(graft.components)} in {layers} from `{graft.donor}`"


def _conditions_legend(record: ExperimentRecord) -> str:
    lines = []
    for cond in record.conditions:
        if not isinstance(cond.kind, Plain):
            continue
        grafts = "; ".join(_graft_text(g, record.num_layers) for g in cond.grafts) or "no graft"
        lines.append(
            f"- **{escape_text(cond.name)}**: {escape_text(cond.description or 'custom grafts')}; recipient "
            f"`{cond.recipient}`; grafts: {grafts}"
        )
    sweep = [c for c in record.conditions if isinstance(c.kind, SweepCell)]
    if sweep:
        lines.append(f"- plus {len(sweep)} sweep conditions `POSITION BAND COMPONENTS` ({sweep[0].description}, ...)")
    finer = [c for c in record.conditions if not isinstance(c.kind, (Plain, SweepCell))]
    if finer:
        lines.append(
            f"- plus {len(finer)} finer-grain conditions and their controls (`{finer[0].name}`: {finer[0].description}, ...)"
        )
    return "\n".join(lines)


def recovery_tables(rows: list[RecoveryRow]) -> list[str]:
    """Per reference pair of an experiment: every condition's recovery over all templates (`rows`:
    the experiment's, over every template and fact kind)."""
    lines = []
    for base, full in dict.fromkeys((r.base, r.full) for r in rows):
        pair = [r for r in rows if (r.base, r.full) == (base, full)]
        metrics = list(dict.fromkeys(r.metric for r in pair))
        cells = {(r.condition, r.metric): r for r in pair}
        lines += [
            f'<details markdown="1"><summary>Recovery between {html.escape(base)} and {html.escape(full)}</summary>',
            "",
            f"Recovery (C - {escape_text(base)}) / ({escape_text(full)} - {escape_text(base)}) over every template, 95% "
            "intervals over facts (`recovery.csv`; undefined where the gap's interval "
            "includes 0):",
            "",
            "| condition | " + " | ".join(METRIC_WORDS.get(m, m) for m in metrics) + " |",
            "|---|" + "---:|" * len(metrics),
        ]
        for cond in dict.fromkeys(r.condition for r in pair):
            lines.append(
                f"| {escape_text(cond)} | "
                + " | ".join(
                    with_interval(c.recovery, c.ci_low, c.ci_high) if c.defined else "undefined"
                    for c in (cells[(cond, m)] for m in metrics)
                )
                + " |"
            )
        lines += ["", "</details>", ""]
    return lines


def session_line(session: dict) -> str:
    """One session of run.json for the report. A session cut off (Ctrl-C, kill, full disk) has
    no `seconds`, and one killed outright no counts either: it is shown as interrupted."""
    started = session.get("started", "?")
    shard = f" shard {session['shard']}" if session.get("shard") else ""
    counts = (
        f" ({session['computed']} conditions computed, {session['reused']} reused)"
        if "computed" in session and "reused" in session
        else ""
    )
    if "seconds" not in session:
        return f"{started}{shard} interrupted{counts}"
    return f"{started}{shard} {session['seconds']} s{counts}"


def _provenance(run: dict) -> list[str]:
    lines = ["## Provenance", "", "| model | path | sha256 | adapter |", "|---|---|---|---|"]
    for key, info in run["models"].items():
        adapter = escape_text(info.get("adapter", "not recorded"))  # registered, inferred or alias of T
        lines.append(f"| {escape_text(key)} | `{info['path']}` | `{info['sha256'][:16]}...` | {adapter} |")
    lines += ["", "| dataset | path | manifest |", "|---|---|---|"]
    for key, info in run["datasets"].items():
        manifest = info["manifest"]
        brief = {k: manifest[k] for k in list(manifest)[:6]}
        lines.append(f"| {escape_text(key)} | `{info['path']}` | `{json.dumps(brief, default=str)[:160]}` |")
    sessions = [s for s in run.get("sessions", []) if isinstance(s, dict)]
    total = sum(s.get("seconds") or 0 for s in sessions)
    lines += [
        "",
        f"- seed: {run['seed']}; device: {run['device']}; dtype: {run['dtype']}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in run["versions"].items()),
        f"- time taken: {total:.1f} s of computation over {len(sessions)} session(s): "
        + "; ".join(session_line(s) for s in sessions),
        "",
        '<details markdown="1"><summary>Dataset manifests and full config</summary>',
        "",
        "```json",
        json.dumps({"datasets": run["datasets"], "config": run["config"]}, indent=1, default=str)[:20000],
        "```",
        "",
        "</details>",
        "",
    ]
    return lines


def build_markdown(report: RunReport, plots: dict[str, list[Path]]) -> str:
    """report.md's text: the verdict, the deviations, one section per experiment, the localize
    results and the provenance."""
    run, study = report.provenance, report.study
    lines = [
        f"# weightgraft report: {escape_text(run['config']['name'])}",
        "",
        "Accuracy is top-k of the target's first token (its first token that is not whitespace "
        "alone, where the tokenizer splits a name's leading space off; each experiment says "
        "where); `prob` its probability; "
        "`target_logprob` the whole target's log-probability; `exact_match` greedy decoding "
        "of the whole target. Values over every template and fact kind, with 95% intervals "
        "from a bootstrap over facts (n: prompts, with the number of facts); `summary.csv` "
        "has every metric per template and per fact kind, `recovery.csv` every condition's "
        "recovery, `comparisons.csv` the paired tests.",
        "",
    ]
    lines += verdict_section(report.summary, report.verdict, study)
    lines += study.deviations()
    for part in report.experiments:
        lines += experiment_section(part, plots.get(part.record.name, []), study, report.summary.rows)
    lines += localize_section(report.localizations)
    lines += _provenance(run)
    return "\n".join(lines)


def experiment_section(
    part: ExperimentReport, plots: list[Path], study: Study, run_rows: list[SummaryRow]
) -> list[str]:
    """One experiment: what it ran, its plots, its tables, the study's own tables (the paper's
    numbers beside its own, from the whole run's rows `run_rows`), its recoveries,
    not-applicable notes and the conditions' grafts."""
    record, rows = part.record, part.rows
    lines = [
        f"## {escape_text(record.title)}",
        "",
        escape_text(record.description),
        "",
        f"Experiment `{record.name}`: recipient `{record.recipient}`, donor "
        f"`{record.donor}`, dataset `{record.dataset}`, "
        f"{len(record.examples)} prompts over {len(record.templates)} templates"
        + (
            f" (a seeded subset of {record.available_examples}, balanced over templates)"
            if record.available_examples > len(record.examples)
            else ""
        )
        + ".",
        "",
    ]
    lines += scored_token_lines(record)
    used = bands_text(part.bands, record.num_layers)
    if used:
        lines += [used, ""]
    lines += [line for path in plots if path.suffix == ".png" for line in (f"![{path.stem}](plots/{path.name})", "")]
    lines += [experiment_table(rows, record), "", template_table(rows, record), ""]
    kinds = fact_kind_table(rows, record)
    if kinds:
        lines += [kinds, ""]
    lines += experiment_finer(part.findings)
    lines += study.experiment_section(run_rows, record)
    lines += recovery_tables(part.recoveries)
    lines += [f"- {note}" for note in na_notes(part.not_applicable)]
    return lines + [
        "",
        '<details markdown="1"><summary>Conditions</summary>',
        "",
        _conditions_legend(record),
        "",
        "</details>",
        "",
    ]


def scored_token_lines(record: ExperimentRecord) -> list[str]:
    """The experiment's prompts whose target's first token is whitespace alone, and which token
    was scored instead (the record's `scored_after_whitespace`, id -> note); none: no line."""
    scored = record.scored_after_whitespace
    if not scored:
        return scored_unit_lines(record)
    pid, note = next(iter(scored.items()))
    return [
        f"Scored token: {len(scored)} of {len(record.examples)} prompts have a target whose first "
        "token is whitespace alone (the tokenizer splits the name's leading space off); for them "
        "rank, top-k, `prob` and the prediction score the first target token that carries content, "
        f"the whitespace token teacher-forced before it (the records' `note` says which; e.g. `{pid}`: {note}).",
        "",
    ] + scored_unit_lines(record)


def scored_unit_lines(record: ExperimentRecord) -> list[str]:
    """The experiment's prompts whose target's first character the tokenizer splits over several
    tokens, and what is scored for them (the record's `scored_units`, id -> tokens); none: no line."""
    units = record.scored_units
    if not units:
        return []
    pid, unit = next(iter(units.items()))
    low, high = min(units.values()), max(units.values())
    spread = f"{low}" if low == high else f"{low} to {high}"
    return [
        f"Scored unit: {len(units)} of {len(record.examples)} prompts have a target whose first "
        f"character the tokenizer splits over {spread} byte tokens (their first is shared by every "
        "name of the script); for them the scored unit is that character's tokens, teacher-forced: "
        "rank is the largest of their ranks (top-k: every one in the top k), `prob` the product of "
        f"their probabilities, the prediction the first token's (e.g. `{pid}`: {unit} tokens; the "
        "records' `note` says which).",
        "",
    ]


def write_report(
    out: str | Path,
    summary: RunSummary,
    verdict: Verdict,
    study: Study,
    experiments: list[ExperimentRecord],
    run: dict,
    localizations: dict[str, LocalizeSummary],
) -> tuple[Path, Path]:
    """Plots, report.md and report.html of the run folder `out` from its summary and verdict
    (the report decides nothing itself), the records of its experiments (read once by the
    caller, who built the summary from them), run.json's body (`run`) and the localize results
    by name, with `study`'s sections (`reporting.study_contract.NO_STUDY`: none); returns the two files'
    paths. It reads no file: the report model (`report_model.build_run_report`) is computed once,
    and the plots and the markdown format it."""
    out = Path(out)
    report = build_run_report(summary, verdict, study, experiments, run, localizations)
    plots = {
        part.record.name: plot_experiment(part.pooled, part.record, part.findings, out / "plots")
        for part in report.experiments
    }
    text = build_markdown(report, plots)
    md_path = write_text_atomic(out / "report.md", text)
    # The page holds text users wrote and is opened in browsers: only the report's own markup stays live.
    body = sanitize(markdown.markdown(text, extensions=["tables", "fenced_code", "md_in_html"]))
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>"
        f"{html.escape(out.name)}</title><style>{CSS}</style></head><body>{body}</body></html>"
    )
    html_path = write_text_atomic(out / "report.html", page)
    return md_path, html_path
