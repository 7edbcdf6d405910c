"""Conditions: what is grafted where, from which donor into which recipient.

A condition is a recipient, a donor, a method (`weights`: dynamic weight grafting through the
engine; `activations`: residual-stream patching from the donor's run) and a list of grafts, each
a position expression, a layer set and a component set; the grafts' union applies to a row.

Shorthand strings cover the paper's vocabulary:
- `PRE` (the recipient alone) and `SFT` (the donor everywhere);
- a position expression (`FE+LT`, `(FE+LT)^C`, ...): every weight at those positions;
- a component set (`ATTN+O+FFN`, `O+FFN`, ...): those components at the experiment's
  `component_at` positions (LT) in its `component_layers` (last quarter), plus every weight at
  `component_base` positions (FE by default; null for none).

Tokens after the prompt (the target's own tokens, teacher-forced to score the whole target) get
the grafts of the prompt's last token, as the engine's `generate(generated="last")` does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator, model_validator

from weightgraft.engine.graft import BANDS
from weightgraft.experiments.components import is_component_expr, parse_components
from weightgraft.experiments.roles import ATOMS, PositionExpr, parse_positions

LayerSpec = str | int | list[int]
LAYER_BANDS = ("all", *BANDS)  # the engine's bands, so that a config accepts exactly what Graft does
BASELINE_NAMES = {"PRE": "recipient alone", "SFT": "donor everywhere"}


def check_layers(value: LayerSpec) -> LayerSpec:
    if isinstance(value, str) and value not in LAYER_BANDS:
        raise ValueError(f"unknown layer band {value!r}; known: {', '.join(LAYER_BANDS)}")
    return value


class GraftSpec(BaseModel):
    """One graft of a condition: every listed component, in these layers, at these positions."""

    model_config = ConfigDict(extra="forbid")

    positions: str = "ALL"
    layers: LayerSpec = "all"
    components: str | list[str] = "all"

    @field_validator("positions")
    @classmethod
    def _positions(cls, value: str) -> str:
        parse_positions(value)
        return value

    @field_validator("layers")
    @classmethod
    def _layers(cls, value: LayerSpec) -> LayerSpec:
        return check_layers(value)

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

    @model_validator(mode="after")
    def _activation_components(self) -> "ConditionSpec":
        if self.method == "activations":
            for graft in self.grafts:
                if parse_components(graft.components) not in (["BLOCKS"], ["all"]):
                    raise ValueError(
                        f"condition {self.name!r}: activation patching replaces whole blocks' "
                        "outputs, so its grafts take components BLOCKS (or all), not "
                        f"{graft.components!r}")
        return self


@dataclass
class Condition:
    """A condition resolved against its experiment: everything needed to build row grafts."""

    name: str
    recipient: str
    donor: str
    method: str
    grafts: list[tuple[PositionExpr, LayerSpec, list[str]]]
    description: str = ""
    meta: dict = field(default_factory=dict)  # e.g. sweep coordinates, for plots

    @property
    def atoms(self) -> set[str]:
        return set().union(*(expr.atoms for expr, _, _ in self.grafts)) if self.grafts else set()

    def to_json(self) -> dict:
        return {
            "name": self.name, "recipient": self.recipient, "donor": self.donor,
            "method": self.method, "description": self.description, "meta": self.meta,
            "grafts": [{"positions": e.text, "layers": lay, "components": comps}
                       for e, lay, comps in self.grafts],
        }

    def key(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)

    def row_masks(self, role_positions: dict[str, list[int]], prompt_len: int, total_len: int
                  ) -> list[tuple[list[bool], LayerSpec, list[str]]]:
        """Per graft: a boolean mask over the row's `total_len` real tokens (prompt followed by
        teacher-forced target tokens, which copy the last prompt token's mask), its layers and
        components. Grafts that select no position are left out. Raises NotApplicable."""
        out = []
        for expr, layers, comps in self.grafts:
            mask = expr.mask(role_positions, prompt_len)
            mask = mask + [mask[-1]] * (total_len - prompt_len)
            if any(mask):
                out.append((mask, layers, comps))
        return out


def resolve_condition(item: str | ConditionSpec, *, recipient: str, donor: str,
                      component_at: str = "LT", component_layers: LayerSpec = "last_quarter",
                      component_base: str | None = "FE", context: str = "") -> Condition:
    """Expand a shorthand string or a full spec into a Condition; errors name the condition."""
    if isinstance(item, ConditionSpec):
        return Condition(
            name=item.name, recipient=item.recipient or recipient, donor=item.donor or donor,
            method=item.method, description=item.description,
            grafts=[(parse_positions(g.positions), g.layers, parse_components(g.components))
                    for g in item.grafts],
        )
    text = item.strip()
    if text in ("PRE", "RECIPIENT"):
        return Condition(text, recipient, donor, "weights", [], BASELINE_NAMES["PRE"])
    if text in ("SFT", "DONOR"):
        return Condition(text, recipient, donor, "weights",
                         [(parse_positions("ALL"), "all", ["all"])], BASELINE_NAMES["SFT"])
    if is_component_expr(text):
        grafts = []
        if component_base:
            grafts.append((parse_positions(component_base), "all", ["all"]))
        grafts.append((parse_positions(component_at), component_layers, parse_components(text)))
        base = f"every weight at {component_base}, " if component_base else ""
        desc = f"{base}{text} at {component_at} in layers {component_layers}"
        return Condition(text, recipient, donor, "weights", grafts, desc)
    try:
        expr = parse_positions(text)
    except ValueError as err:
        where = f" in {context}" if context else ""
        raise ValueError(
            f"unknown condition {text!r}{where}: it is not PRE/SFT, not a position expression "
            f"over {', '.join(ATOMS)} ({err}), nor a component set such as ATTN+O+FFN or O+FFN"
        ) from None
    return Condition(text, recipient, donor, "weights", [(expr, "all", ["all"])],
                     f"every weight at {text}")


def validate_condition(item: str | ConditionSpec, context: str) -> None:
    """Fail early (at config load) on a condition that cannot be resolved."""
    resolve_condition(item, recipient="?", donor="?", context=context)
