"""The one way from a written condition (a shorthand string or a `ConditionSpec`) to a resolved
`Condition`: `resolve_condition` (see the package's docstring for the shorthand)."""

from __future__ import annotations

from weightgraft.experiments.conditions.bands import LayerSpec
from weightgraft.experiments.conditions.components import (
    AUTHORS_EVERY_WEIGHT,
    EVERY_WEIGHT,
    UNEMBEDDING,
    describe,
    is_component_expr,
    parse_components,
)
from weightgraft.experiments.conditions.position_roles import ATOMS, parse_positions
from weightgraft.experiments.conditions.resolved import Condition, ResolvedGraft
from weightgraft.experiments.conditions.spec import ConditionMethod, ConditionSpec, Fidelity, Unembedding

BASELINE_NAMES = {"PRE": "recipient alone", "SFT": "donor model alone (every weight everywhere)"}


def resolve_condition(
    item: str | ConditionSpec,
    *,
    recipient: str,
    donor: str,
    component_at: str = "LT",
    component_layers: LayerSpec = "authors_fourth_quarter",
    component_base: str | None = None,
    unembedding: Unembedding = "recipient",
    context: str = "",
    fidelity: Fidelity | None = None,
) -> Condition:
    """Expand a shorthand string or a full spec into a Condition; errors name the condition.
    `fidelity` says how a position expression grafts "every weight" (see the module's
    docstring; None: clean, unlabelled); a full spec carries its own grafts."""
    if isinstance(item, ConditionSpec):
        return _from_spec(item, recipient, donor, fidelity)
    text = item.strip()
    if text in ("PRE", "RECIPIENT", "SFT", "DONOR"):
        return _baseline(text, recipient, donor, fidelity)
    if is_component_expr(text):
        comps = parse_components(text)
        grafts = []
        if component_base:
            grafts.append(ResolvedGraft(parse_positions(component_base), "all", [EVERY_WEIGHT], donor))
        grafts.append(ResolvedGraft(parse_positions(component_at), component_layers, comps, donor))
        base = f"every weight at {component_base}, " if component_base else "nothing at FE; "
        desc = f"{base}{text} ({describe(comps)}) at {component_at} in layers {component_layers}"
        return Condition(text, recipient, donor, ConditionMethod.WEIGHTS, grafts, desc, fidelity=fidelity or "")
    try:
        expr = parse_positions(text)
    except ValueError as err:
        where = f" in {context}" if context else ""
        raise ValueError(
            f"unknown condition {text!r}{where}: it is not PRE/SFT, not a position expression "
            f"over {', '.join(ATOMS)} ({err}), nor a component set such as ATTN+O+FFN or O+FFN"
        ) from None
    return _position_condition(text, expr, recipient, donor, unembedding, fidelity)


def _from_spec(item: ConditionSpec, recipient: str, donor: str, fidelity: Fidelity | None) -> Condition:
    """A full spec: its own grafts, each with its own donor or the condition's."""
    own_donor = item.donor or donor
    grafts = [
        ResolvedGraft(
            parse_positions(g.positions),
            g.layers,
            parse_components(g.components),
            g.donor or own_donor,
            heads=sorted(set(g.heads)) if g.heads is not None else None,
            neurons=sorted(set(g.neurons)) if g.neurons is not None else None,
            shape=None if g.shape is None or g.shape.is_identity() else g.shape,
        )
        for g in item.grafts
    ]
    return Condition(
        name=item.name,
        recipient=item.recipient or recipient,
        donor=own_donor,
        method=item.method,
        description=item.description,
        grafts=grafts,
        fidelity=item.fidelity or fidelity or "",
        meta=dict(item.meta),
        controls=item.controls,
    )


def _baseline(text: str, recipient: str, donor: str, fidelity: Fidelity | None) -> Condition:
    """PRE/RECIPIENT (nothing grafted) or SFT/DONOR (every weight everywhere)."""
    if text in ("PRE", "RECIPIENT"):
        return Condition(
            text, recipient, donor, ConditionMethod.WEIGHTS, [], BASELINE_NAMES["PRE"], fidelity=fidelity or ""
        )
    return Condition(
        text,
        recipient,
        donor,
        ConditionMethod.WEIGHTS,
        [ResolvedGraft(parse_positions("ALL"), "all", ["all"], donor)],
        BASELINE_NAMES["SFT"],
        fidelity=fidelity or "",
    )


def _position_condition(
    text: str, expr, recipient: str, donor: str, unembedding: Unembedding, fidelity: Fidelity | None
) -> Condition:
    """Every weight at the positions of `expr`, as the authors grafted it or in the clean
    definition, with the donor's unembedding everywhere when asked."""
    head = [ResolvedGraft(parse_positions("ALL"), "all", list(UNEMBEDDING), donor)] if unembedding == "donor" else []
    if fidelity == "authors":
        return Condition(
            text,
            recipient,
            donor,
            ConditionMethod.WEIGHTS,
            [ResolvedGraft(expr, "all", [AUTHORS_EVERY_WEIGHT], donor), *head],
            f"every weight at {text} as the authors grafted it (the token embedding, not the position "
            "embedding; every layer); the unembedding the recipient's, except on a tied model where "
            "it goes with the embedding (the donor's when the last token is grafted)"
            + ("; and the donor's unembedding at every position" if head else ""),
            fidelity=fidelity,
        )
    head_words = (
        "; the donor's unembedding at every position"
        if unembedding == "donor"
        else "; the recipient's final norm and unembedding"
    )
    return Condition(
        text,
        recipient,
        donor,
        ConditionMethod.WEIGHTS,
        [ResolvedGraft(expr, "all", [EVERY_WEIGHT], donor), *head],
        f"every weight at {text} (embeddings included){head_words}",
        fidelity=fidelity or "",
    )


def validate_condition(item: str | ConditionSpec, *, recipient: str, donor: str, context: str) -> None:
    """Fail early (at config load) on a condition that cannot be resolved against its
    experiment's recipient and donor."""
    resolve_condition(item, recipient=recipient, donor=donor, context=context)
