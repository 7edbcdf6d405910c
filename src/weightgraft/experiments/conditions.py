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
import random
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from weightgraft.donors.shaped import check_shape
from weightgraft.engine.controls import DIMENSIONS, ControlError, draw_sets
from weightgraft.engine.graft import normal_units
from weightgraft.experiments.components import describe, is_component_expr, parse_components
from weightgraft.experiments.roles import NotApplicable, PositionExpr, parse_positions
from weightgraft.experiments.vocabulary import (
    ATOMS,
    AUTHORS_EVERY_WEIGHT,
    EVERY_WEIGHT,
    LAYER_BANDS,
    UNEMBEDDING,
    ConditionMethod,
)

LayerSpec = str | int | list[int]
Unembedding = Literal["recipient", "donor"]
Fidelity = Literal["authors", "clean"]
BASELINE_NAMES = {"PRE": "recipient alone", "SFT": "donor model alone (every weight everywhere)"}


def check_layer_spec(value: LayerSpec) -> LayerSpec:
    """A layer set as written (a known band name, or layer numbers); whether it fits a model's
    depth is the plan's check (`planner.conditions_on_model`)."""
    if isinstance(value, str) and value not in LAYER_BANDS:
        raise ValueError(f"unknown layer band {value!r}; known: {', '.join(LAYER_BANDS)}")
    if isinstance(value, list) and not value:
        raise ValueError("layers: [] names no layer, so the graft would change nothing; name layers, a band or all")
    return value


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
        """The fields that differ from the donor itself, in a fixed order."""
        body = {} if self.scale == 1.0 else {"scale": float(self.scale)}
        return body | {k: v for k, v in (("rank", self.rank), ("top", self.top)) if v is not None}

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


class NoDraw(NotApplicable):
    """A row with too few other positions for a random draw of a graft's size."""

    def __init__(self, reason: str):
        Exception.__init__(self, reason)
        self.atom = ""


@dataclass(frozen=True)
class DrawnPositions:
    """Random positions of a row, for a control: as many as `of` selects in that row, drawn from
    the row's other positions; draw `draw` (from 1) of `seed`, per example, so that a resumed or
    sharded run draws the same. Draws of one row differ from each other."""

    of: PositionExpr
    seed: int
    draw: int

    @property
    def text(self) -> str:
        return self.of.text

    def mask(self, role_positions: dict[str, list[int]], num_tokens: int, row: str = "") -> list[bool]:
        chosen = self.of.evaluate(role_positions, num_tokens)
        others = [p for p in range(num_tokens) if p not in chosen]
        rng = random.Random(f"{self.seed}/{row}")
        try:
            drawn = draw_sets(
                [tuple(chosen)], [others], self.draw, rng, "positions", self.of.text, "the row is too short"
            )
        except ControlError as err:
            raise NoDraw(f"random draw {self.draw} of {self.of.text}: {err}") from None
        picked = set(drawn[-1][0])
        return [i in picked for i in range(num_tokens)]


@dataclass(frozen=True)
class ResolvedGraft:
    positions: PositionExpr | DrawnPositions
    layers: LayerSpec
    components: list[str]
    donor: str
    heads: list[int] | None = None
    neurons: list[int] | None = None
    shape: ShapeSpec | None = None

    @property
    def donor_key(self) -> str:
        """The name of this graft's donor in the Grafter: the model key, or with a shape the
        shaped donor's name (`sft~rank=4`)."""
        return self.donor if self.shape is None else f"{self.donor}~{self.shape.key()}"

    @property
    def units(self) -> tuple[str, list[int]] | None:
        if self.heads is not None:
            return "heads", self.heads
        return None if self.neurons is None else ("neurons", self.neurons)

    def to_json(self) -> dict:
        """The graft as data; the finer fields only when set, so that a whole-component graft
        keeps its key (and fingerprint) bit for bit."""
        body = {
            "positions": self.positions.text,
            "layers": self.layers,
            "components": self.components,
            "donor": self.donor,
        }
        for name in ("heads", "neurons"):
            if getattr(self, name) is not None:
                body[name] = list(getattr(self, name))
        if self.shape is not None:
            body["shape"] = self.shape.to_json()
        if isinstance(self.positions, DrawnPositions):
            body["random_positions"] = {"seed": self.positions.seed, "draw": self.positions.draw}
        return body


@dataclass
class Condition:
    """A condition resolved against its experiment: everything needed to build row grafts."""

    name: str
    recipient: str
    donor: str  # the default donor (activation patching's only one)
    method: ConditionMethod
    grafts: list[ResolvedGraft]
    description: str = ""
    meta: dict = field(default_factory=dict)  # e.g. sweep coordinates, for plots
    fidelity: str = ""  # "authors", "clean" or vocabulary.SAME_IN_BOTH; "" outside paper presets
    controls: ControlSpec | None = None  # expanded into conditions at plan time (not part of the key)

    @property
    def donors(self) -> tuple[str, ...]:
        """Every model key the condition takes weights from (the default donor included, so
        that a baseline is computed beside the grafted conditions of its experiment)."""
        return tuple(sorted({self.donor, *(g.donor for g in self.grafts)}))

    @property
    def donor_sources(self) -> tuple[str, ...]:
        """The Grafter's donor names this condition reads: `donors`, with a shaped graft's
        donor under its shaped name (`ResolvedGraft.donor_key`)."""
        return tuple(sorted({self.donor, *(g.donor_key for g in self.grafts)}))

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
        self, role_positions: dict[str, list[int]], prompt_len: int, total_len: int, row: str = ""
    ) -> list[tuple[list[bool], ResolvedGraft]]:
        """Per graft: a boolean mask over the row's `total_len` real tokens (prompt followed by
        teacher-forced target tokens, which copy the last prompt token's mask) and the graft.
        Grafts that select no position are left out. `row`: the example's id (random positions
        are drawn per example). Raises NotApplicable."""
        out = []
        for graft in self.grafts:
            if isinstance(graft.positions, DrawnPositions):
                mask = graft.positions.mask(role_positions, prompt_len, row)
            else:
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
