"""From a validated experiment to the concrete work: its conditions (sweeps expanded for the
model's depth), its examples (a seeded, template-balanced subset when capped) and layer sets."""

from __future__ import annotations

import random
from collections import defaultdict

from weightgraft.engine.graft import EIGHTHS, HALVES, QUARTERS, Graft
from weightgraft.experiments.components import parse_components
from weightgraft.experiments.conditions import Condition, ResolvedGraft, resolve_condition
from weightgraft.experiments.config import ExperimentSpec
from weightgraft.experiments.roles import parse_positions
from weightgraft.experiments.vocabulary import AUTHOR_BANDS, EVERY_WEIGHT, Direction, author_band


def layer_indices(spec, num_layers: int) -> list[int]:
    """Concrete layers: the authors' bands (`authors_*`) by their rule, everything else (engine
    bands, ints, negatives from the end) by the engine's own semantics."""
    if isinstance(spec, str) and spec in AUTHOR_BANDS:
        return author_band(spec, num_layers)
    return Graft(layers=spec).layer_indices(num_layers)


def engine_layers(spec, num_layers: int):
    """What a Graft takes: `all` stays `all` (so model-level components follow the engine's
    rule for groups), anything else becomes its concrete layer list."""
    return "all" if spec == "all" else layer_indices(spec, num_layers)


def auto_bands(num_layers: int) -> list[str]:
    """Eighths for deep models, quarters from 4 layers, halves below; never an empty band."""
    if num_layers >= 16:
        return list(EIGHTHS)
    if num_layers >= 4:
        return list(QUARTERS)
    return list(HALVES)


def experiment_conditions(exp: ExperimentSpec, num_layers: int) -> list[Condition]:
    """Every condition of an experiment, in the order the report shows them."""
    conditions = [
        resolve_condition(
            item,
            recipient=exp.recipient,
            donor=exp.donor,
            component_at=exp.component_at,
            component_layers=exp.component_layers,
            component_base=exp.component_base,
            unembedding=exp.unembedding,
            context=f"experiment {exp.name!r}",
        )
        for item in exp.conditions
    ]
    if exp.sweep is not None:
        bands = auto_bands(num_layers) if exp.sweep.bands == "auto" else exp.sweep.bands
        for at in exp.sweep.at:
            others = [o for o in exp.sweep.at if o != at]
            for comps in exp.sweep.components:
                for band in bands:
                    try:
                        layer_indices(band, num_layers)
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
                            method="weights",
                            grafts=grafts,
                            description=f"{comps} at {at} in layers {band}{extra}",
                            meta={"sweep_at": at, "band": band, "components": comps},
                        )
                    )
    for cond in conditions:  # every band fits this model (fail before any work)
        for graft in cond.grafts:
            try:
                layer_indices(graft.layers, num_layers)
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
            raise ValueError(f"{context}: unknown template(s) {unknown}; the dataset has {known}")
        prompts = [p for p in prompts if p.template_id in templates]
    if not prompts:
        raise ValueError(f"{context}: no evaluation prompts to score")
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
