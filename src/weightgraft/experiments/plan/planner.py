"""Building a run's plan from its config and the models' configs: the run's preflight.

`build_plan` reads what a run can read without weights (the device, every model's config.json
and file fingerprints, the datasets, the shared tokenizer), resolves every experiment on its
recipient (conditions with their layers, the examples encoded, the fixed batches and chunks, the
fingerprints) and returns the `RunPlan` the runner computes. What can fail later fails here, in
one line naming the config field and the fix; no model's weights are loaded.
"""

from __future__ import annotations

from collections.abc import Mapping

from weightgraft.adapters import adapter_for
from weightgraft.adapters.base import GROUPS
from weightgraft.data.encode import check_context, describe_scored, encode_scored_prompt
from weightgraft.data.templates import in_authors_wording
from weightgraft.donors.shaped import ShapeError
from weightgraft.engine.controls import ControlError
from weightgraft.engine.units import UnitError, check_units
from weightgraft.errors import UserError
from weightgraft.experiments import result_files
from weightgraft.experiments.conditions import Condition, ResolvedGraft
from weightgraft.experiments.conditions.components import resolve_for_model
from weightgraft.experiments.conditions.control_conditions import with_controls
from weightgraft.experiments.config import ExperimentSpec, RunConfig
from weightgraft.experiments.example_rows import Example
from weightgraft.experiments.layers import concrete_layers
from weightgraft.experiments.models import context_length
from weightgraft.experiments.plan.checks import (
    check_datasets,
    check_distinct_models,
    check_pairs,
    model_configs,
    planned_model,
    require_device_here,
    used_models,
)
from weightgraft.experiments.plan.plan_inputs import PlanInputs
from weightgraft.experiments.plan.selection import ModelFacts, experiment_conditions, select_examples
from weightgraft.experiments.plan.types import ExperimentPlan, PlannedModel, RunPlan, Shard


def build_plan(config: RunConfig, resources: PlanInputs, shard: Shard | None = None) -> RunPlan:
    """The plan of a run of `config` (of shard I of N when `shard=(I, N)`).

    config: a validated run config; resources: where tokenizers, prompts and fingerprints are
    read (and cached for the run); no weights are loaded. Raises UserError (DataError for a
    prompt that cannot be encoded) on anything the run would fail on."""
    require_device_here(config.device)
    used = used_models(config)
    configs = model_configs(config, used["keys"])
    check_pairs(used["pairs"], {k: c.get_text_config() for k, c in configs.items()}, config.allow_config_differences)
    models = {
        key: planned_model(key, config.models[key], configs[key], resources.fingerprint(key), config.trust_remote_code)
        for key in sorted(used["keys"])
    }
    experiments = config.expanded()
    conditions = planned_conditions(config, models)
    check_distinct_models(config, conditions)
    check_datasets(config)
    tokenizer = resources.tokenizer(sorted(used["keys"]))
    encoded: dict[tuple, tuple[list[Example], int]] = {}
    for exp in experiments:  # presets share their prompts: encode each choice once
        if _prompt_choice(exp) not in encoded:
            encoded[_prompt_choice(exp)] = encode_examples(resources, exp, tokenizer)
    plans = [
        plan_experiment(config, exp, models, conditions[exp.name], *encoded[_prompt_choice(exp)], shard)
        for exp in experiments
    ]
    return RunPlan(config, models, plans, shard)


def _prompt_choice(exp: ExperimentSpec) -> tuple:
    """What an experiment's encoded examples depend on."""
    return (exp.dataset, repr(exp.templates), exp.max_examples, exp.directions, exp.wording, exp.recipient)


def planned_conditions(config: RunConfig, models: Mapping[str, PlannedModel]) -> dict[str, list[Condition]]:
    """Every experiment's conditions resolved on its recipient, as the plan holds them; alone,
    for estimates made before the models exist (a finetune shares its base model's config)."""
    return {exp.name: conditions_on_model(exp, models[exp.recipient]) for exp in config.expanded()}


def conditions_on_model(exp: ExperimentSpec, model: PlannedModel) -> list[Condition]:
    """The experiment's conditions resolved on its recipient, each condition's controls after
    it (`conditions.controls.with_controls`); a layer set, component, head, neuron or rank the recipient
    lacks is a UserError naming the condition."""
    n = model.num_layers
    check_built_for(exp, model)
    try:
        conditions = experiment_conditions(exp, n, ModelFacts(model.components, model.tied))
    except UserError:
        raise
    except ValueError as err:
        where = "" if f"experiment {exp.name!r}" in str(err) else f"experiment {exp.name!r}: "
        raise UserError(
            f"{where}{err}; models.{exp.recipient} has {n} layers, so fix the layers in the config"
        ) from err
    components = list(model.components)
    for cond in conditions:
        for graft in cond.grafts:
            names = resolve_for_model(graft.components, components)
            lacking = [x for x in ([names] if isinstance(names, str) else names) if x not in components]
            lacking = [x for x in lacking if x not in GROUPS]
            if lacking:
                raise UserError(
                    f"experiment {exp.name!r}, condition {cond.name!r}: models.{cond.recipient} "
                    f"({model.model_type}) has no component(s) {lacking}; it has "
                    f"{components}, so fix the condition's components"
                )
            try:
                concrete_layers(graft.layers, n)
            except ValueError as err:
                raise UserError(
                    f"experiment {exp.name!r}, condition {cond.name!r}: layers "
                    f"{graft.layers!r}: {err}; models.{cond.recipient} has {n} "
                    "layers, so fix `layers` (0..{n - 1}, negatives from the end, "
                    "or a band such as last_half)"
                ) from err
            check_finer(graft, model, f"experiment {exp.name!r}, condition {cond.name!r} (models.{cond.recipient})")
    try:
        conditions = with_controls(conditions, n, model.unit_specs())
    except ControlError as err:
        raise ControlError(f"experiment {exp.name!r}: {err}") from None
    names = [c.name for c in conditions]
    dupes = sorted({x for x in names if names.count(x) > 1})
    if dupes:
        raise UserError(
            f"experiment {exp.name!r}: a control's name repeats a condition's: {dupes}; rename the condition"
        )
    return conditions


def check_built_for(exp: ExperimentSpec, model: PlannedModel) -> None:
    """An experiment written for one depth and head count (`built_for`) run on another would
    graft the wrong layers or heads without a word: refuse it, naming both shapes."""
    if not exp.built_for:
        return
    heads = model.units.get("o", [None, None, None])[2]
    actual = {"num_layers": model.num_layers, "num_heads": heads}
    wrong = {k: v for k, v in exp.built_for.items() if actual.get(k) is not None and actual[k] != v}
    if wrong:
        said = ", ".join(f"{k} {v}" for k, v in wrong.items())
        has = ", ".join(f"{k} {actual[k]}" for k in wrong)
        raise UserError(
            f"experiment {exp.name!r} was written for {said}, but models.{exp.recipient} has {has}; "
            f"give the preset the recipient's own ({', '.join(f'{k}: {actual[k]}' for k in wrong)})"
        )


def check_finer(graft: ResolvedGraft, model: PlannedModel, where: str) -> None:
    """A graft's heads or neurons within the model's counts (the engine's `check_units` and its
    message), and its shape's rank or entry count within every matrix it shapes."""
    names = resolve_for_model(graft.components, list(model.components))
    names = list(model.components) if names == "all" else names
    adapter = adapter_for(model.model_type)
    names = [c for name in names for c in (adapter.group(name) if name in GROUPS else (name,))]
    if graft.units is not None:
        specs = model.unit_specs()
        try:
            if not specs:
                raise UnitError(
                    f"this {model.model_type} model's config has no num_attention_heads, so its heads and "
                    "neurons cannot be told apart; graft whole components"
                )
            check_units(tuple(graft.units[1]), [c for c in names if c in specs], specs, model.model_type)
        except UnitError as err:
            raise UnitError(f"{where}: {err}") from None
    shape = graft.shape
    matrices = [(c, model.matrices[c]) for c in names if c in model.matrices]
    if shape is None or not matrices or (shape.rank is None and not isinstance(shape.top, int)):
        return
    comp, (rows, cols) = min(matrices, key=lambda item: min(item[1]) if shape.rank else item[1][0] * item[1][1])
    if shape.rank is not None and shape.rank > min(rows, cols):
        raise ShapeError(
            f"{where}: rank {shape.rank} is above the rank of {comp}'s weight (a {rows} x {cols} matrix, at "
            f"most {min(rows, cols)}); use rank <= {min(rows, cols)}, or leave rank out for the whole change"
        )
    if isinstance(shape.top, int) and shape.top > rows * cols:
        raise ShapeError(
            f"{where}: top {shape.top} is above the {rows * cols} entries of {comp}'s weight ({rows} x {cols}); "
            f"use top <= {rows * cols} or a fraction"
        )


def encode_examples(resources: PlanInputs, exp: ExperimentSpec, tokenizer) -> tuple[list[Example], int]:
    """The experiment's examples, encoded, and how many prompts it could have scored."""
    every = resources.prompts(exp.dataset)
    if exp.wording == "authors":
        every = [in_authors_wording(p) for p in every]
    context, seed = f"experiment {exp.name!r}", resources.config.seed
    available = select_examples(every, exp.templates, None, seed, context, exp.directions)
    prompts = select_examples(every, exp.templates, exp.max_examples, seed, context, exp.directions)
    examples = []
    for prompt in prompts:
        enc = encode_scored_prompt(tokenizer, prompt)
        positions = {str(k): list(v) for k, v in enc.positions.items()}
        note = describe_scored(tokenizer, enc)
        examples.append(
            Example(prompt, list(enc.input_ids), list(enc.target_ids), positions, enc.scored, note, enc.unit)
        )
    check_context(
        {e.prompt.id: len(e.input_ids) + len(e.target_ids) for e in examples},
        context_length(resources.config.models[exp.recipient]),
        f"experiment {exp.name!r} (models.{exp.recipient})",
    )
    return examples, len(available)


def example_batches(
    config: RunConfig, vocab_size: int, examples: list[Example], rows_per_example: int
) -> list[list[Example]]:
    """The experiment's examples cut into the batches every chunk runs (at most
    `rows_per_example` conditions each): similar prompts side by side, so that lengths line up
    and padding is short. A function of all the examples and the config alone, so that a
    resumed run and every shard form the same batches."""
    if not examples:
        return []
    # the width of rows aligned on the prompt's last token (see execute.compute_chunk)
    longest = max(len(e.input_ids) - 1 for e in examples) + max(len(e.target_ids) for e in examples)
    # Tokens per forward: the config's cap, and at most ~1 GiB of float32 logits.
    budget = min(config.max_batch_tokens, 2**28 // vocab_size)
    per_batch = max(1, budget // (longest * rows_per_example))
    ordered = sorted(examples, key=lambda e: (e.prompt.template_id, len(e.input_ids)))
    return [ordered[i : i + per_batch] for i in range(0, len(ordered), per_batch)]


def fixed_chunks(conditions: list[Condition], per_chunk: int) -> list[tuple[str, ...]]:
    """Conditions that share recipient, donors and method, `per_chunk` at a time in the
    experiment's order: fixed by the conditions alone, never by what is pending."""
    groups: dict[tuple, list[str]] = {}
    for cond in conditions:
        groups.setdefault((cond.recipient, cond.donors, cond.method), []).append(cond.name)
    return [tuple(names[i : i + per_chunk]) for names in groups.values() for i in range(0, len(names), per_chunk)]


def torch_device_type(device: str) -> str:
    """cpu, cuda, mps: results differ between kinds of device, not between two GPUs of a kind."""
    return device.split(":")[0]


def plan_experiment(
    config: RunConfig,
    exp: ExperimentSpec,
    models: dict[str, PlannedModel],
    conditions: list[Condition],
    examples: list[Example],
    available: int,
    shard: Shard | None,
) -> ExperimentPlan:
    """One experiment's batches, chunks and fingerprints (this process's and the whole run's)."""
    per_chunk = config.conditions_per_chunk
    batches = example_batches(config, models[exp.recipient].vocab_size, examples, min(per_chunk, len(conditions)))
    ids = [[e.prompt.id for e in batch] for batch in batches]
    plan = ExperimentPlan(
        spec=exp,
        recipient=models[exp.recipient],
        conditions=conditions,
        examples=examples,
        available=available,
        batches=ids,
        chunks=fixed_chunks(conditions, per_chunk),
        fingerprints={},
        whole_fingerprints={},
        shard=shard,
        computation={"device": torch_device_type(config.device), "conditions_per_chunk": per_chunk},
    )
    mine, my_ids = plan.my_examples(), ids if shard is None else ids[shard[0] :: shard[1]]
    for cond in conditions:
        prints = {k: models[k].sha256 for k in (cond.recipient, *cond.donors)}

        def fingerprint(of: list[Example], batch_ids: list[list[str]], cond=cond, prints=prints) -> str:
            return result_files.condition_fingerprint(
                cond.to_json(), config.dtype, prints, of, dict(plan.computation, batches=batch_ids)
            )

        plan.fingerprints[cond.name] = fingerprint(mine, my_ids)
        plan.whole_fingerprints[cond.name] = fingerprint(examples, ids) if shard else plan.fingerprints[cond.name]
    return plan
