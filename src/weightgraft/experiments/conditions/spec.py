"""A condition as written in a run config, in full form: `ConditionSpec` and its `GraftSpec`s
(with a donor's `ShapeSpec` and the `ControlSpec` of its baselines), each field checked when the
config is read; shorthand strings are expanded by `resolve.resolve_condition`."""

from __future__ import annotations

import json
from enum import Enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from weightgraft.donors.shaped import check_shape
from weightgraft.engine.controls import DIMENSIONS, ControlError
from weightgraft.engine.graft import normal_units
from weightgraft.experiments.conditions.bands import LayerSpec, check_layer_spec
from weightgraft.experiments.conditions.components import parse_components
from weightgraft.experiments.conditions.position_roles import parse_positions

Unembedding = Literal["recipient", "donor"]
Fidelity = Literal["authors", "clean"]


# ---- methods -------------------------------------------------------------------------------
class ConditionMethod(str, Enum):
    """How a condition brings in the donor: its weights, grafted through the engine (`weights`),
    or its residual stream after each grafted block, patched in (`activations`). A `str` enum:
    configs and files hold the plain values, which compare equal to the members."""

    WEIGHTS = "weights"
    ACTIVATIONS = "activations"

    __str__ = str.__str__  # the value, in every Python (not "ConditionMethod.WEIGHTS")


class ShapeSpec(BaseModel):
    """The donor's change to the recipient, reshaped (`donors.shaped.ShapedDonor`): the recipient
    plus `scale` times the change, truncated to its top `rank` singular directions per matrix or
    kept in its `top` largest entries (a count, or a fraction in (0, 1])."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scale: float = 1.0
    rank: int | None = None
    top: int | float | None = None

    @model_validator(mode="after")
    def _valid(self) -> ShapeSpec:
        check_shape(self.scale, self.rank, self.top)  # the engine's own checks and messages
        return self

    def is_identity(self) -> bool:
        """Scale 1, whole change: the donor itself."""
        return self.scale == 1.0 and self.rank is None and self.top is None

    def to_json(self) -> dict:
        """The fields that differ from the donor itself (their defaults), in their declared order."""
        return self.model_dump(exclude_defaults=True)

    def key(self) -> str:
        """`scale=0.5,rank=4`: the suffix of the shaped donor's name (`sft~scale=0.5,rank=4`)."""
        return ",".join(f"{k}={json.dumps(v)}" for k, v in self.to_json().items())

    @classmethod
    def from_key(cls, key: str) -> ShapeSpec:
        """The inverse of `key`."""
        return cls(**{k: json.loads(v) for k, v in (part.split("=", 1) for part in key.split(","))})


class ControlSpec(BaseModel):
    """Baselines for a condition of one graft, added as conditions of their own at plan time:
    `random` grafts of the same size with the dimension `vary` redrawn (seeded), and the
    complement (the graft's other heads, neurons, layers or positions)."""

    model_config = ConfigDict(extra="forbid")

    random: int = Field(default=0, ge=0)
    seed: int = 0
    # None: the finest dimension the graft narrows (heads, then neurons), else layers
    vary: str | None = None
    complement: bool = False

    @field_validator("vary")
    @classmethod
    def _vary(cls, value: str | None) -> str | None:
        if value is not None and value not in DIMENSIONS:
            raise ControlError(f"vary must name one of {', '.join(DIMENSIONS)} (or be left out), not {value!r}")
        return value


class GraftSpec(BaseModel):
    """One graft of a condition: every listed component, in these layers, at these positions,
    from `donor` (a model key; default the condition's donor); narrowed to `heads` or `neurons`
    of the components, and with the donor's change shaped by `shape`."""

    model_config = ConfigDict(extra="forbid")

    positions: str = "ALL"
    layers: LayerSpec = "all"
    components: str | list[str] = "all"
    donor: str | None = None
    heads: list[int] | None = None  # q, k, v, o only (k, v: key-value heads)
    neurons: list[int] | None = None  # gate, up, down (FFN) only
    shape: ShapeSpec | None = None

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

    @model_validator(mode="after")
    def _units(self) -> GraftSpec:
        # the engine's own checks and messages (heads on components that have them, not both)
        normal_units(self.heads, self.neurons, parse_components(self.components))
        return self

    def units(self) -> tuple[str, list[int]] | None:
        """("heads" or "neurons", sorted indices), or None for whole components."""
        if self.heads is not None:
            return "heads", sorted(set(self.heads))
        return None if self.neurons is None else ("neurons", sorted(set(self.neurons)))


class ConditionSpec(BaseModel):
    """A named condition in full form (shorthand strings expand to this)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    grafts: list[GraftSpec] = []
    recipient: str | None = None  # model key; default: the experiment's
    donor: str | None = None
    method: ConditionMethod = ConditionMethod.WEIGHTS
    description: str = ""
    # The definition this row belongs to, for experiments that compare the two (see
    # vocabulary: FIDELITIES); None: the experiment's own.
    fidelity: Fidelity | None = None
    meta: dict = {}  # free plot coordinates, copied to Condition.meta
    controls: ControlSpec | None = None

    @model_validator(mode="after")
    def _controls(self) -> ConditionSpec:
        if self.controls is None:
            return self
        if len(self.grafts) != 1:
            raise ControlError(
                f"condition {self.name!r}: controls redraw one graft, and it has {len(self.grafts)}; "
                "give controls to a condition of one graft"
            )
        vary, units = self.controls.vary, self.grafts[0].units()
        if vary in ("heads", "neurons") and (units is None or units[0] != vary):
            raise ControlError(f"condition {self.name!r}: cannot vary {vary}: its graft names no {vary}")
        if self.method != ConditionMethod.WEIGHTS:
            raise ControlError(f"condition {self.name!r}: controls are for weight grafts (method: weights)")
        return self

    @model_validator(mode="after")
    def _activation_components(self) -> ConditionSpec:
        if self.method == ConditionMethod.ACTIVATIONS:
            for graft in self.grafts:
                if graft.heads is not None or graft.neurons is not None or graft.shape is not None:
                    raise ValueError(
                        f"condition {self.name!r}: activation patching replaces whole blocks' outputs, "
                        "so its grafts take no heads, neurons or shape; use method: weights"
                    )
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
