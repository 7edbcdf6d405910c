"""Which conditions and examples an experiment runs: its conditions (sweeps expanded for the
model's depth, a clean row equal to its authors' twin merged into it) and its examples (a
seeded, template-balanced subset when capped). Layer sets are made concrete by
`experiments.layers`."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from weightgraft.data.data_errors import DataError
from weightgraft.engine.graft import EIGHTHS, HALVES, QUARTERS
from weightgraft.experiments.conditions import (
    Condition,
    ConditionMethod,
    ConditionSpec,
    ResolvedGraft,
    resolve_condition,
)
from weightgraft.experiments.conditions.components import (
    ENGINE_MODEL_LEVEL,
    EVERY_WEIGHT,
    parse_components,
    resolve_for_model,
)
from weightgraft.experiments.conditions.paper_atoms import AUTHOR_BANDS, author_band
from weightgraft.experiments.conditions.position_roles import parse_positions
from weightgraft.experiments.config import ExperimentSpec
from weightgraft.experiments.layers import concrete_layers
from weightgraft.experiments.vocabulary import CLEAN_SUFFIX, SAME_IN_BOTH, Direction

HEAD_NAMES = ("ln_final", "lm_head")  # they act on a position's output only
# One position per role, the last token last: whether an expression covers LT.
_ONE_EACH = {"first_entity": [0], "relation": [1], "movie_title": [2], "last_token": [4]}


def covers_last_token(expr) -> bool:
    """Whether a position expression grafts the prompt's last token, whose output (and the
    target's, which copies its grafts) is the only one scored."""
    return expr.mask(_ONE_EACH, 5)[4]


@dataclass(frozen=True)
class ModelFacts:
    """What a condition's grafts mean on one model: its components and whether its
    unembedding is its token embedding (tied)."""

    components: tuple[str, ...]
    tied: bool


def ties_embeddings(model) -> bool:
    """True when the model's unembedding is its token embedding (one matrix); also on a model
    built on the meta device from its config alone (no weights), where tied means one Parameter."""
    out, inp = model.get_output_embeddings(), model.get_input_embeddings()
    if out is None or inp is None:
        return False
    if out.weight is inp.weight:
        return True
    return not out.weight.is_meta and out.weight.data_ptr() == inp.weight.data_ptr()


def _band_or_none(name: str, num_layers: int) -> list[int] | None:
    """The band's layers; None when it does not fit (kept, so that the check below names the
    problem)."""
    try:
        return author_band(name, num_layers)
    except ValueError:
        return None


def auto_bands(num_layers: int) -> list[str]:
    """Eighths for deep models, quarters from 4 layers, halves below; never an empty band."""
    if num_layers >= 16:
        return list(EIGHTHS)
    if num_layers >= 4:
        return list(QUARTERS)
    return list(HALVES)


def _resolve(exp: ExperimentSpec, item, mode: str | None) -> Condition:
    return resolve_condition(
        item,
        recipient=exp.recipient,
        donor=exp.donor,
        component_at=exp.component_at,
        component_layers=exp.component_layers,
        component_base=exp.component_base,
        # the authors' rows take the authors' unembedding rule; the option is the clean rows'
        unembedding="recipient" if mode == "authors" else exp.unembedding,
        context=f"experiment {exp.name!r}",
        fidelity=mode,
    )


def fidelity_conditions(exp: ExperimentSpec) -> list[Condition]:
    """The experiment's own conditions in its fidelity: under `both`, each shorthand (and each
    spec without a fidelity) twice, the authors' row under its name and the clean row as
    `NAME [clean]`; a spec with its own fidelity once, left out only when the experiment runs
    the other definition alone."""
    modes = ["authors", "clean"] if exp.fidelity == "both" else [exp.fidelity]
    out = []
    for item in exp.conditions:
        own = item.fidelity if isinstance(item, ConditionSpec) else None
        if own is not None:  # one definition's row: kept unless the experiment runs the other alone
            if exp.fidelity in (None, "both", own):
                out.append(_resolve(exp, item, own))
            continue
        for mode in modes:
            cond = _resolve(exp, item, mode)
            if exp.fidelity == "both" and mode == "clean":
                cond.name += CLEAN_SUFFIX
            out.append(cond)
    return out


def graft_keys(cond: Condition, num_layers: int, model: ModelFacts | None) -> frozenset:
    """What a condition grafts, as (positions, layer, component, donor) keys: on `model` its
    components resolved against that model (the head counted only where it is scored: at the
    last token), else as written."""
    keys = set()
    for graft in cond.grafts:
        layers = concrete_layers(graft.layers, num_layers)
        if model is None:
            keys.add((graft.positions.text, tuple(layers), tuple(graft.components), graft.donor))
            continue
        names = resolve_for_model(graft.components, list(model.components), model.tied)
        names = list(model.components) if names == "all" else names
        for name in names:
            if name in HEAD_NAMES:
                if covers_last_token(graft.positions):
                    keys.add(("scored", None, name, graft.donor))
                continue
            for layer in [None] if name in ENGINE_MODEL_LEVEL else layers:
                keys.add((graft.positions.text, layer, name, graft.donor))
    return frozenset(keys)


def merge_twins(conditions: list[Condition], num_layers: int, model: ModelFacts | None) -> list[Condition]:
    """Drop each clean row that grafts exactly what its authors' twin grafts (on `model` when
    given, else as written) and label the twin SAME_IN_BOTH."""
    by_name = {c.name: c for c in conditions}
    dropped = set()
    for cond in conditions:
        if not cond.name.endswith(CLEAN_SUFFIX):
            continue
        twin = by_name.get(cond.name[: -len(CLEAN_SUFFIX)])
        if twin is None or (twin.recipient, twin.method) != (cond.recipient, cond.method):
            continue
        if graft_keys(twin, num_layers, model) == graft_keys(cond, num_layers, model):
            dropped.add(cond.name)
            twin.fidelity = SAME_IN_BOTH
    return [c for c in conditions if c.name not in dropped]


def experiment_conditions(exp: ExperimentSpec, num_layers: int, model: ModelFacts | None = None) -> list[Condition]:
    """Every condition of an experiment, in the order the report shows them. A graft on an
    authors' band that is empty at this depth (`authors_third_quarter_below_half` when
    n % 4 < 2) is left out; under `fidelity: both` a clean row equal to its authors' twin is
    dropped (on `model`, the recipient's facts, when given)."""
    conditions = fidelity_conditions(exp)
    for cond in conditions:
        cond.grafts = [
            g
            for g in cond.grafts
            if not (
                isinstance(g.layers, str) and g.layers in AUTHOR_BANDS and _band_or_none(g.layers, num_layers) == []
            )
        ]
    if exp.fidelity == "both":
        conditions = merge_twins(conditions, num_layers, model)
    if exp.sweep is not None:
        bands = auto_bands(num_layers) if exp.sweep.bands == "auto" else exp.sweep.bands
        for at in exp.sweep.at:
            others = [o for o in exp.sweep.at if o != at]
            for comps in exp.sweep.components:
                for band in bands:
                    try:
                        concrete_layers(band, num_layers)
                    except ValueError as err:
                        raise ValueError(
                            f"layer band {band} does not fit a {num_layers}-layer model "
                            f"({err}); choose coarser bands in `sweep.bands`"
                        ) from err
                    grafts = [ResolvedGraft(parse_positions(at), band, parse_components(comps), exp.donor)]
                    if exp.sweep.others_full and others:
                        grafts.append(
                            ResolvedGraft(parse_positions("+".join(others)), "all", [EVERY_WEIGHT], exp.donor)
                        )
                    extra = f", every weight at {'+'.join(others)}" if exp.sweep.others_full and others else ""
                    conditions.append(
                        Condition(
                            name=f"{at} {band} {comps}",
                            recipient=exp.recipient,
                            donor=exp.donor,
                            method=ConditionMethod.WEIGHTS,
                            grafts=grafts,
                            description=f"{comps} at {at} in layers {band}{extra}",
                            meta={"sweep_at": at, "band": band, "components": comps},
                        )
                    )
    for cond in conditions:  # every band fits this model (fail before any work)
        for graft in cond.grafts:
            try:
                concrete_layers(graft.layers, num_layers)
            except ValueError as err:
                raise ValueError(f"experiment {exp.name!r}, condition {cond.name!r}: {err}") from None
    names = [c.name for c in conditions]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"experiment {exp.name!r} has repeated condition names {dupes}")
    return conditions


def select_examples(
    prompts: list,
    templates: list[str] | None,
    max_examples: int | None,
    seed: int,
    context: str,
    directions: Direction = "both",
) -> list:
    """The prompts an experiment scores: a direction and template filter, then (if capped) a
    seeded subset taking templates in turn so each stays represented. Order follows the dataset."""
    if directions != "both":
        prompts = [p for p in prompts if p.reversed == (directions == "reversed")]
    if templates is not None:
        known = sorted({p.template_id for p in prompts})
        unknown = [t for t in templates if t not in known]
        if unknown:
            raise DataError(f"{context}: unknown template(s) {unknown}; the dataset has {known}")
        prompts = [p for p in prompts if p.template_id in templates]
    if not prompts:
        raise DataError(f"{context}: no evaluation prompts to score")
    if max_examples is None or max_examples >= len(prompts):
        return list(prompts)
    by_template: dict[str, list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        by_template[p.template_id].append(i)
    rng = random.Random(seed)
    queues = []
    for template in sorted(by_template):
        indices = by_template[template][:]
        rng.shuffle(indices)
        queues.append(indices)
    chosen: list[int] = []
    while len(chosen) < max_examples:
        for queue in queues:
            if queue and len(chosen) < max_examples:
                chosen.append(queue.pop())
    return [prompts[i] for i in sorted(chosen)]
