"""The reproduce report's sections about the job itself: the finetunes' levels, the paper's claims
decided on this model, what the model knew of the world and what each finetune kept (the `knowledge` step's value), and every
way the job differs from the paper's recipe.

`reproduce_report.py` puts them together with the paper-vs-this-run tables.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from weightgraft.paper.estimate import paper_model_name
from weightgraft.paper.plain_facts import HeldOutKnowledge
from weightgraft.paper.reproduce_job import Job
from weightgraft.paper.reproduce_recipe import PAPER_BATCH, PAPER_EPOCHS, PAPER_FACTS, PAPER_SETTING, Recipe
from weightgraft.paper.study import PAPER
from weightgraft.reporting.numbers import with_interval
from weightgraft.reporting.summary import RunSummary
from weightgraft.reporting.verdict import check_pattern
from weightgraft.reporting.verdict_section import verdict_section


def finetune_section(job: Job, steps: dict) -> list[str]:
    """Each finetune's purpose, its validation top-5 after every epoch and the epoch kept."""
    lines = [
        "## Finetunes",
        "",
        "Validation top-5 after each epoch (held-out wordings; the best epoch is kept):",
        "",
        "| model | purpose | top-5 by epoch | kept | seconds |",
        "|---|---|---|---:|---:|",
    ]
    for name, ft in job.finetunes.items():
        record = steps.get(f"finetune:{name}")
        if record is None:
            continue
        out = record["outputs"]
        history = " / ".join(f"{v:.2f}" for v in out.get("validation_top5_by_epoch") or [])
        lines.append(f"| {name} | {ft.purpose} | {history} | {out.get('best_epoch')} | {record['seconds']} |")
    return lines


def claims_section(job: Job, group_name: str, steps: dict) -> list[str]:
    """The paper's claims decided on the main group's summary (the run step's output, checked by
    its recorded sha256 before reuse), as a run's report decides them."""
    group = job.runs.get(group_name)
    if group is None or f"run:{group_name}" not in steps:
        return []
    summary = RunSummary.read(Path(group.out))
    verdict = check_pattern(summary, PAPER.asked.claims)
    return verdict_section(summary, verdict, replace(PAPER, verdict_title="The paper's claims on this model"))


def _interval(value: float, interval: tuple[float, float]) -> str:
    return with_interval(value, *interval)


def plain_facts_section(knowledge: HeldOutKnowledge | None) -> list[str]:
    """PRE's and each finetune's top-1 and top-5 on the held-out plain facts PRE knows, with 95%
    intervals over the facts (the job's `knowledge` step; None: the step has not run)."""
    title = "## The model's own knowledge: held-out plain facts"
    if knowledge is None:
        return [title, "", "Not measured: the job's `knowledge` step has not run."]
    lines = [
        title,
        "",
        f"Of {knowledge.candidates} plain facts of the world (weightgraft's own prompts, none about films), the "
        f"pretrained model answers {len(knowledge.facts)} at top-1 (the answer's first token)"
        + (f"; {knowledge.unasked} cannot be asked of its tokenizer" if knowledge.unasked else "")
        + ". Those are the held-out set: PRE's accuracy on it is 1 by construction, and each "
        "finetune's says how much of what the model knew it kept (95% intervals, bootstrap over the facts).",
        "",
    ]
    if not knowledge.facts:
        return [*lines, "None to score: the pretrained model answers none of them at top-1."]
    lines += ["| model | top-1 | top-5 | kept of PRE's |", "|---|---:|---:|---:|"]
    for score in knowledge.scores:
        kept = f"{score.top1:.0%}"
        top1, top5 = _interval(score.top1, score.top1_interval), _interval(score.top5, score.top5_interval)
        lines.append(f"| {score.model} | {top1} | {top5} | {kept} |")
    return lines


def _finetune_settings(steps: dict, key: str) -> set:
    """The values the job's finetunes recorded for one config option (None where one left it out)."""
    return {r["inputs"]["config"].get(key) for name, r in steps.items() if name.startswith("finetune:")}


def deviations_section(job: Job, steps: dict) -> list[str]:
    """Every way this job differs from the paper's recipe (conditions.md), named."""
    recipe = job.recipe
    precisions = _finetune_settings(steps, "precision")
    lines = ["## Deviations from the paper", ""]
    if paper_model_name(recipe.model) is None:
        lines.append(f"- Model: {recipe.model} is none of the paper's four; the tables show all four beside it.")
    if recipe.setting != "aggressive":
        lines.append(f"- Setting {recipe.setting!r}, not the paper's main (aggressive) setting.")
    pairs = (
        ("facts per dataset", recipe.facts, PAPER_FACTS),
        ("epochs", recipe.epochs, PAPER_EPOCHS),
        ("batch size", recipe.batch_size, PAPER_BATCH),
        ("learning rate", recipe.lr, PAPER_SETTING.lr),
    )
    for what, ours, paper in pairs:
        if ours != paper:
            lines.append(f"- {what}: {ours:g} (the paper: {paper:g}).")
    if precisions - {"fp16"}:
        lines.append(
            f"- Finetuning precision {', '.join(sorted(precisions))} (the paper: fp16 mixed precision on a GPU)."
        )
    if "eager" in _finetune_settings(steps, "attention"):
        lines.append(
            "- Finetunes attend with transformers' eager kernel (matmul and softmax) instead of sdpa, "
            "for speed on this CPU: the same attention, not a change of method."
        )
    if recipe.group_by_length:
        lines.append(
            "- Batches group texts of similar length (transformers' length-grouped sampler, for "
            "speed; the paper: random batches)."
        )
    lines += _forgetting_levers(recipe, steps)
    if recipe.max_examples is not None:
        lines.append(f"- At most {recipe.max_examples} prompts scored per experiment (the paper: all).")
    if not lines[2:]:
        lines.append("- None in the recipe: the paper's model-independent settings throughout.")
    return lines


def _forgetting_levers(recipe: Recipe, steps: dict) -> list[str]:
    """The levers against forgetting this job pulled, each a deviation: the paper pulls none."""
    levers: list[str] = []
    replay = steps.get("replay")
    if recipe.replay and replay is not None:
        levers.append(
            f"- Self-replay: {replay['outputs']['texts']} continuations of neutral prompts by the pretrained "
            "model itself mixed into every finetune as general text"
            + (" (beside --general-text's)" if recipe.general_text else "")
            + f": general text is {recipe.mix_ratio:g} of the training texts (weightgraft's lever "
            "against forgetting; the paper has none)."
        )
    if recipe.general_loss == "kl":
        levers.append(
            "- The general text is learned as the pretrained model's whole next-token distribution at "
            "each of its positions (KL from a frozen copy of it), not as its tokens (weightgraft's "
            "lever against forgetting; the paper's gentle setting trains on its general text's tokens)."
        )
    if recipe.lora_rank:
        levers.append(
            f"- LoRA finetunes: adapters of rank {recipe.lora_rank} (alpha {2 * recipe.lora_rank}) on every "
            "linear layer of the blocks, merged into each saved model; embeddings and norms stay the "
            "pretrained model's (the paper trains every weight; weightgraft's lever against forgetting)."
        )
    if recipe.anchor:
        levers.append(
            f"- Anchored finetunes: after each optimizer step every trained weight is pulled back towards "
            f"the pretrained model's by lr x {recipe.anchor:g} of its change (weightgraft's lever against "
            "forgetting; the paper's finetunes decay weights towards zero only)."
        )
    return levers
