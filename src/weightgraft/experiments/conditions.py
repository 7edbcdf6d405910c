"""Conditions: what is grafted where, from which donor(s) into which recipient.

A condition is a recipient, a method (`weights`: dynamic weight grafting through the engine;
`activations`: residual-stream patching from the donor's run) and a list of grafts, each a
position expression, a layer set, a component set and the donor it takes them from (default:
the condition's donor); the grafts' union applies to a row. Two grafts of one condition may take
different donors (the paper's hybrid), never the same (position, layer, component).

Shorthand strings cover the paper's vocabulary:
- `PRE` (the recipient alone) and `SFT` (the donor model itself: every weight everywhere);
- a position expression (`FE+LT`, `(FE+LT)^C`, ...): every weight at those positions. In the
  `clean` fidelity: the embeddings (token and position) and every layer; the final norm and
  unembedding stay the recipient's unless the experiment says `unembedding: donor`, which takes
  the donor's unembedding at every position. In the `authors` fidelity, as the authors' code did:
  the token embedding only (never GPT-2's `wpe`) and every layer, and on a tied model the
  unembedding with the embedding (the donor's where the last token's embedding is grafted);
  the final norm is never grafted;
- a component set (`ATTN+O+FFN`, `O+FFN`, ...): those components at the experiment's
  `component_at` positions (LT) in its `component_layers`, plus every weight at
  `component_base` positions (none by default, as in the paper's component figure).

Tokens after the prompt (the target's own tokens, teacher-forced to score the whole target) get
the grafts of the prompt's last token, as the engine's `generate(generated="last")` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from weightgraft.experiments.components import describe, is_component_expr, parse_components
from weightgraft.experiments.roles import PositionExpr, parse_positions
from weightgraft.experiments.vocabulary import ATOMS, AUTHORS_EVERY_WEIGHT, EVERY_WEIGHT, LAYER_BANDS, UNEMBEDDING

LayerSpec = str | int | list[int]
Unembedding = Literal["recipient", "donor"]
Fidelity = Literal["authors", "clean"]
BASELINE_NAMES = {"PRE": "recipient alone", "SFT": "donor model alone (every weight everywhere)"}


def check_layer_spec(value: LayerSpec) -> LayerSpec:
    """A layer set as written (a known band name, or layer numbers); whether it fits a model's
    depth is the plan's check (`planner.conditions_on_model`)."""
    if isinstance(value, str) and value not in LAYER_BANDS:
        raise ValueError(f"unknown layer band {value!r}; known: {', '.join(LAYER_BANDS)}")
    return value


class GraftSpec(BaseModel):
    """One graft of a condition: every listed component, in these layers, at these positions,
    from `donor` (a model key; default the condition's donor)."""

    model_config = ConfigDict(extra="forbid")

    positions: str = "ALL"
    layers: LayerSpec = "all"
    components: str | list[str] = "all"
    donor: str | None = None

    @field_validator("positions")
    @classmethod
    def _positions(cls, value: str) -> str:
        parse_positions(value)
        return value

    @field_validator("layers")
    @classmethod
    def _layers(cls, value: LayerSpec) -> LayerSpec:
        return check_layer_spec(value)

    @field_validator("components")
    @classmethod
    def _components(cls, value: str | list[str]) -> str | list[str]:
        parse_components(value)
        return value


class ConditionSpec(BaseModel):
    """A named condition in full form (shorthand strings expand to this)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    grafts: list[GraftSpec] = []
    recipient: str | None = None  # model key; default: the experiment's
    donor: str | None = None
    method: Literal["weights", "activations"] = "weights"
    description: str = ""
    # The definition this row belongs to, for experiments that compare the two (see
    # vocabulary: FIDELITIES); None: the experiment's own.
    fidelity: Fidelity | None = None

    @model_validator(mode="after")
    def _activation_components(self) -> ConditionSpec:
        if self.method == "activations":
            for graft in self.grafts:
                if parse_components(graft.components) not in (["BLOCKS"], ["all"]):
                    raise ValueError(
                        f"condition {self.name!r}: activation patching replaces whole blocks' "
                        "outputs, so its grafts take components BLOCKS (or all), not "
                        f"{graft.components!r}"
                    )
                if graft.donor not in (None, self.donor):
                    raise ValueError(
                        f"condition {self.name!r}: activation patching takes one "
                        "donor; give it as the condition's `donor`"
                    )
        return self


@dataclass(frozen=True)
class ResolvedGraft:
    positions: PositionExpr
    layers: LayerSpec
    components: list[str]
    donor: str

    def to_json(self) -> dict:
        return {
            "positions": self.positions.text,
            "layers": self.layers,
            "components": self.components,
            "donor": self.donor,
        }


@dataclass
class Condition:
    """A condition resolved against its experiment: everything needed to build row grafts."""

    name: str
    recipient: str
    donor: str  # the default donor (activation patching's only one)
    method: str
    grafts: list[ResolvedGraft]
    description: str = ""
    meta: dict = field(default_factory=dict)  # e.g. sweep coordinates, for plots
    fidelity: str = ""  # "authors", "clean" or vocabulary.SAME_IN_BOTH; "" outside paper presets

    @property
    def donors(self) -> tuple[str, ...]:
        """Every model key the condition takes weights from (the default donor included, so
        that a baseline is computed beside the grafted conditions of its experiment)."""
        return tuple(sorted({self.donor, *(g.donor for g in self.grafts)}))

    def to_json(self) -> dict:
        body = {
            "name": self.name,
            "recipient": self.recipient,
            "donor": self.donor,
            "method": self.method,
            "description": self.description,
            "meta": self.meta,
            "grafts": [g.to_json() for g in self.grafts],
        }
        if self.fidelity:
            body["fidelity"] = self.fidelity
        return body

    def key(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def row_masks(
        self, role_positions: dict[str, list[int]], prompt_len: int, total_len: int
    ) -> list[tuple[list[bool], ResolvedGraft]]:
        """Per graft: a boolean mask over the row's `total_len` real tokens (prompt followed by
        teacher-forced target tokens, which copy the last prompt token's mask) and the graft.
        Grafts that select no position are left out. Raises NotApplicable."""
        out = []
        for graft in self.grafts:
            mask = graft.positions.mask(role_positions, prompt_len)
            mask = mask + [mask[-1]] * (total_len - prompt_len)
            if any(mask):
                out.append((mask, graft))
        return out


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
        return Condition(text, recipient, donor, "weights", grafts, desc, fidelity=fidelity or "")
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
        ResolvedGraft(parse_positions(g.positions), g.layers, parse_components(g.components), g.donor or own_donor)
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
    )


def _baseline(text: str, recipient: str, donor: str, fidelity: Fidelity | None) -> Condition:
    """PRE/RECIPIENT (nothing grafted) or SFT/DONOR (every weight everywhere)."""
    if text in ("PRE", "RECIPIENT"):
        return Condition(text, recipient, donor, "weights", [], BASELINE_NAMES["PRE"], fidelity=fidelity or "")
    return Condition(
        text,
        recipient,
        donor,
        "weights",
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
            "weights",
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
        "weights",
        [ResolvedGraft(expr, "all", [EVERY_WEIGHT], donor), *head],
        f"every weight at {text} (embeddings included){head_words}",
        fidelity=fidelity or "",
    )


def validate_condition(item: str | ConditionSpec, *, recipient: str, donor: str, context: str) -> None:
    """Fail early (at config load) on a condition that cannot be resolved against its
    experiment's recipient and donor."""
    resolve_condition(item, recipient=recipient, donor=donor, context=context)
