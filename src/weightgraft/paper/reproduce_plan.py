"""The plan a reproduce job prints before it starts: its steps with estimated size and time."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch
from transformers import AutoTokenizer
from transformers.trainer_pt_utils import get_length_grouped_indices

from weightgraft.data.build import template_texts
from weightgraft.data.facts import generate_facts, known_film_facts
from weightgraft.data.names import NamePool
from weightgraft.data.templates import EVAL_TEMPLATES, VALIDATION_TEMPLATES, eval_prompts_for
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.models import model_dir
from weightgraft.experiments.plan import PlannedModel
from weightgraft.experiments.plan.checks import planned_model
from weightgraft.experiments.plan.planner import planned_conditions
from weightgraft.experiments.plan.selection import experiment_conditions
from weightgraft.paper import calibrate, estimate
from weightgraft.paper.neutral_prompts import NEUTRAL_PROMPTS
from weightgraft.paper.plain_fact_list import plain_fact_candidates
from weightgraft.paper.replay import PROMPTS_PER_BATCH
from weightgraft.paper.reproduce_job import (
    REPLAY_SAMPLES,
    REPLAY_TOKENS,
    TEXTS_PER_DIRECTION,
    Job,
    finetune_config,
    rank_and_world,
    run_config,
)

# The depth a model is planned with when nothing tells it (no config on disk, not one of the
# paper's four): only the count of a layer sweep's conditions depends on it, and 24 lies within
# the paper's models' depths (16 to 48 layers).
ASSUMED_LAYERS = 24


@dataclass
class PlannedStep:
    name: str
    what: str
    steps: int | None = None  # optimizer steps (finetunes) or scored rows (runs)
    tokens: int | None = None
    seconds: float | None = None


def _padded(lengths: list[int], batch: int, seed: int, texts: int, grouped: bool) -> float:
    """The mean length of a batch's longest text, to which every row of the batch is padded:
    of random batches, or of the batches transformers' length-grouped sampler forms from `texts`
    texts (lengths drawn from the sample)."""
    rng = random.Random(seed)
    if not grouped:
        draws = [max(rng.sample(lengths, min(batch, len(lengths)))) for _ in range(200)]
        return sum(draws) / len(draws)

    drawn = [rng.choice(lengths) for _ in range(texts)]
    order = get_length_grouped_indices(drawn, batch, generator=torch.Generator().manual_seed(seed))
    maxima = [max(drawn[i] for i in order[start : start + batch]) for start in range(0, texts, batch)]
    return sum(maxima) / len(maxima)


def _sample_lengths(job: Job) -> tuple[list[int], float, float, int, str]:
    """Tokens of sample training texts, their mean, an evaluation prompt's mean and the longest
    target's (the runner unembeds that many positions a row), from a few generated facts:
    counted by the model's tokenizer when it is on disk, else estimated at 4 characters a token."""
    pool = NamePool(job.recipe.seed)
    kind = job.sets[job.recipe.datasets[0]].kind
    facts = generate_facts({kind: 8}, job.recipe.seed, pool, known_film_facts(job.recipe.seed, pool))
    texts = template_texts(facts, job.recipe.seed, 2 * TEXTS_PER_DIRECTION)  # both directions
    prompts = [p for f in facts for p in eval_prompts_for(f, EVAL_TEMPLATES)]
    folder = model_dir(job.recipe.model)
    lengths, note = None, "estimated at 4 characters per token"
    if folder is not None:
        try:
            tok = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
            targets = [len(ids) for ids in tok([p.target for p in prompts], add_special_tokens=False)["input_ids"]]
            lengths = [  # set last: both counts or neither
                [len(ids) + 1 for ids in tok(items)["input_ids"]] for items in (texts, [p.text for p in prompts])
            ]
            note = "counted with the model's tokenizer"
        except (OSError, ValueError):
            pass
    if lengths is None:
        lengths = [[len(t) // 4 + 1 for t in items] for items in (texts, [p.text for p in prompts])]
        targets = [len(p.target) // 4 + 1 for p in prompts]
    text, prompt = (sum(x) / len(x) for x in lengths)
    return lengths[0], text, prompt, max(targets), note


def _measured(job: Job, config, tokens: int) -> calibrate.Measured | None:
    """A step and a forward measured on the model at the finetunes' batch and padded length
    (None without the model on disk: the published size's throughput stands in)."""
    folder = model_dir(job.recipe.model)
    if folder is None:
        return None
    return calibrate.measure(
        folder,
        config.batch_size,
        tokens,
        job.recipe.device,
        precision=config.precision,
        lora_rank=config.lora_rank,
        attention=config.attention,
    )


def plan_steps(job: Job) -> tuple[list[PlannedStep], dict]:
    """Every step with its estimated size and time, and facts about the estimate."""
    recipe = job.recipe
    size = estimate.model_size(recipe.model)
    _, world = rank_and_world()
    config = finetune_config(recipe)
    text_lengths, text_tokens, prompt_tokens, scored, token_note = _sample_lengths(job)
    texts_by_finetune = {name: _finetune_texts(job, ft, config) for name, ft in job.finetunes.items()}
    padded = {
        name: _padded(text_lengths, config.batch_size, recipe.seed, texts, config.group_by_length)
        for name, texts in texts_by_finetune.items()
    }
    measured = _measured(job, config, round(max(padded.values(), default=text_tokens)))
    steps = [
        PlannedStep(
            "datasets", ", ".join(f"{k} ({s.kind}, {s.n_facts} facts, {s.purpose})" for k, s in job.sets.items())
        )
    ]
    if recipe.replay:
        steps.append(_replay_step(measured))
    total = sum(step.seconds or 0.0 for step in steps)
    for name, ft in job.finetunes.items():
        data = job.sets[ft.dataset]
        texts = texts_by_finetune[name]
        optimizer_steps = math.ceil(texts / (config.batch_size * world)) * config.epochs
        tokens = round(texts * text_tokens * config.epochs)
        if measured:
            validation = min(config.max_validation_prompts or 10**9, _validation_prompts(data))
            seconds = _measured_finetune(measured, config, optimizer_steps, padded[name], validation, prompt_tokens)
        else:
            seconds = estimate.finetune_seconds(size, optimizer_steps, tokens, recipe.device) if size else None
        total += seconds or 0.0
        steps.append(
            PlannedStep(
                f"finetune:{ft.name}",
                f"{ft.purpose}; {texts} texts x {config.epochs} epochs",
                optimizer_steps,
                tokens,
                seconds,
            )
        )
    steps.append(_knowledge_step(job, measured, prompt_tokens))
    total += steps[-1].seconds or 0.0
    base = _base_model(recipe.model)
    for group in job.runs.values():
        step = _run_step(job, group, base, size, (prompt_tokens, scored), recipe.device, measured)
        total += step.seconds or 0.0
        steps.append(step)
    steps.append(PlannedStep("report", "paper vs this run, one table per analysis"))
    facts = {
        "device": recipe.device,
        "size": size,
        "config": config,
        "token_note": token_note,
        "world": world,
        "total_seconds": total if size else None,
        "measured": measured,
    }
    return steps, facts


def _replay_step(measured) -> PlannedStep:
    """The self-replay step: the neutral prompts continued `REPLAY_TOKENS` tokens,
    `PROMPTS_PER_BATCH` of them (`REPLAY_SAMPLES` rows each) in one batch, one forward per new
    token (the prompts' prefill reads the first, each sampled token but the last one more), each
    timed by the calibration as a decoding step."""
    forwards = -(-len(NEUTRAL_PROMPTS) // PROMPTS_PER_BATCH) * REPLAY_TOKENS
    texts = len(NEUTRAL_PROMPTS) * REPLAY_SAMPLES
    seconds = None
    if measured:
        seconds = forwards * measured.decode_seconds
    what = f"the pretrained model continues {len(NEUTRAL_PROMPTS)} neutral prompts: {texts} texts of {REPLAY_TOKENS} tokens"
    return PlannedStep("replay", what, forwards, texts * REPLAY_TOKENS, seconds)


def _knowledge_step(job: Job, measured, prompt_tokens: float) -> PlannedStep:
    """The held-out check: every candidate plain fact asked of the pretrained model and of each
    finetune, 64 prompts a forward (`plain_facts.answer_ranks`), every position unembedded.

    At the measured rates with no constant of its own: on SmolLM2 (2-core EPYC, 29 Nov) 5 models
    x 198 facts took 18.5-19.8 s where this plans 24.5 s (a forward of 1.31 ms a token, an
    unembedding of 0.49 ms, prompts of 13.8 tokens); the calibration's 40-token rows cost a
    little more a token than these 14-token ones. Asked one prompt a forward, they took 92 s."""
    models = 1 + len(job.finetunes)
    forwards = len(plain_fact_candidates()) * models
    seconds = None
    if measured:
        seconds = measured.forward_seconds(forwards, prompt_tokens)
        seconds += forwards * prompt_tokens * measured.unembed_seconds
    what = f"{len(plain_fact_candidates())} plain facts asked of PRE and {models - 1} finetunes (what each kept)"
    return PlannedStep("knowledge", what, forwards, None, seconds)


def _measured_finetune(measured, config, optimizer_steps: int, padded: float, validation: int, prompt_tokens: float):
    """A finetune's seconds from the measured step: its optimizer steps at the batches' padded
    length, each epoch's validation (top-k on held-out prompts), and with the KL loss the frozen
    PRE's forward over each batch's general rows."""
    seconds = measured.finetune_seconds(optimizer_steps, padded)
    seconds += config.epochs * measured.forward_seconds(validation, prompt_tokens)
    if config.general_loss == "kl":
        seconds += measured.forward_seconds(optimizer_steps * config.batch_size * config.mix_ratio, padded)
    return seconds


def _finetune_texts(job: Job, ft, config) -> int:
    """Training texts of one finetune: its dataset's, plus the general text mixed in."""
    data = job.sets[ft.dataset]
    texts = data.n_facts * data.texts_per_fact
    if config.mix_ratio:
        texts += round(config.mix_ratio / (1 - config.mix_ratio) * texts)
    return texts


def _validation_prompts(data) -> int:
    """Validation prompts of a planned set: each validation wording in each trained direction."""
    return data.n_facts * len(VALIDATION_TEMPLATES) * (2 if data.order == "both" else 1)


def _base_model(model: str) -> PlannedModel | None:
    """The base model as the run plan describes it, from its config on disk (a finetune shares
    it); None when there is none (a paper model's published size stands in)."""
    config = estimate._local_config(model)
    if config is None:
        return None
    try:
        return planned_model("pre", model, config, "")
    except ValueError:  # no adapter for this architecture: the run would refuse it
        return None


def _run_step(
    job: Job, group, base: PlannedModel | None, size, lengths: tuple[float, int], device: str, measured
) -> PlannedStep:
    """One run of the job: its conditions as the run plan resolves them (on the base model's
    config when on disk, else as written on the published depth) times its examples; `lengths`:
    a prompt's mean tokens and the longest target's."""
    prompt_tokens, scored = lengths
    paths = {"pre": job.recipe.model, **{name: str(ft.out) for name, ft in job.finetunes.items()}}
    cfg = parse_config(run_config(job, group, paths))
    layers = size.layers if size else ASSUMED_LAYERS
    counts = planned_conditions(cfg, dict.fromkeys(cfg.models, base)) if base else None
    rows, parts = 0, []
    for exp in cfg.expanded():
        n_templates = len(exp.templates) if exp.templates else len(EVAL_TEMPLATES)
        examples = job.sets[group.datasets[exp.dataset]].n_facts * n_templates * 2
        if exp.max_examples is not None:
            examples = min(examples, exp.max_examples)
        n_conditions = len(counts[exp.name] if counts else experiment_conditions(exp, layers))
        rows += n_conditions * examples
        parts.append(f"{exp.name} {n_conditions}x{examples}")
    if measured:
        seconds = measured.run_seconds(rows, prompt_tokens, scored)
    else:
        seconds = estimate.run_seconds(size, rows, round(prompt_tokens), device) if size else None
    what = "; ".join(parts) + " (conditions x examples)"
    return PlannedStep(f"run:{group.name}", what, rows, round(rows * prompt_tokens), seconds)


def _count(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return str(value)


def describe_plan(job: Job) -> str:
    steps, facts = plan_steps(job)
    recipe, size, config = job.recipe, facts["size"], facts["config"]
    paper = estimate.paper_model_name(recipe.model)
    kind = estimate.device_kind(facts["device"])
    lines = ["weightgraft reproduce: plan", ""]
    if size:
        params = f"{size.params / 1e9:.2f} B" if size.params >= 1e8 else f"{size.params / 1e6:.2f} M"
        lines.append(f"model      {recipe.model}: {params} parameters, {size.layers} layers ({size.source})")
    else:
        lines.append(
            f"model      {recipe.model}: size unknown (no config on disk and not one of "
            "the paper's four models); no time estimate"
        )
    lines.append(
        f"published  {'rows of ' + paper if paper else 'not one of the paper models: the report shows all four'}"
    )
    measured = facts["measured"]
    if measured:
        speed = (
            f"measured here: an optimizer step ({config.precision}{', eager attention' if config.attention == 'eager' else ''}) of {measured.batch} x {measured.tokens} tokens "
            f"{measured.step_seconds:.2f} s, a forward {measured.forward_token_seconds * 1e3:.2f} ms per token, "
            f"an unembedding {measured.unembed_seconds * 1e3:.2f} ms per position"
        )
    else:
        speed = f"assumed throughput (no model on disk to measure): {estimate.THROUGHPUT[kind].note}"
    lines.append(f"device     {facts['device']} x {facts['world']} process(es); {speed}")
    lines.append(
        f"finetuning {recipe.setting}: lr {config.lr:g}, weight decay {config.weight_decay:g}, "
        f"batch {config.batch_size}, {config.epochs} epochs, {config.precision}, "
        f"max length {config.max_length}, general text share {config.mix_ratio:g}"
        f"{' (self-replay)' if recipe.replay else ''}"
        f"{', learned by KL from PRE' if recipe.general_loss == 'kl' else ''}"
        f"{f', LoRA rank {recipe.lora_rank}' if recipe.lora_rank else ''}"
        f"{f', anchored to PRE ({recipe.anchor:g})' if recipe.anchor else ''}; a checkpoint every epoch"
    )
    lines.append(
        f"runs       dtype {recipe.dtype}, examples per experiment "
        f"{recipe.max_examples or 'all'}, bootstrap {recipe.bootstrap}"
    )
    lines.append(f"tokens     {facts['token_note']}")
    lines.append("")
    width = max(len(s.name) for s in steps)
    lines.append(f"{'#':>2}  {'step':<{width}}  {'steps/rows':>10}  {'tokens':>8}  {'time':>8}  what")
    for i, s in enumerate(steps, 1):
        when = estimate.human_seconds(s.seconds) if s.seconds is not None else "-"
        lines.append(f"{i:>2}  {s.name:<{width}}  {_count(s.steps):>10}  {_count(s.tokens):>8}  {when:>8}  {s.what}")
    lines.append("")
    if facts["total_seconds"] is not None:
        lines.append(
            f"estimated total: {estimate.human_seconds(facts['total_seconds'])} "
            f"(finetune memory ~{estimate.train_memory_gib(size):.2g} GiB for weights, "
            "gradients and AdamW moments, plus activations)"
        )
    for note in job.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines)
