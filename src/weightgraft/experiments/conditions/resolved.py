"""A condition resolved against its experiment (`Condition`, its `ResolvedGraft`s): what the
plan fingerprints and the methods graft, row by row (`Condition.row_masks`)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

from weightgraft.engine.controls import ControlError, draw_sets
from weightgraft.experiments.conditions.bands import LayerSpec
from weightgraft.experiments.conditions.position_roles import NotApplicable, PositionExpr
from weightgraft.experiments.conditions.spec import ConditionMethod, ControlSpec, ShapeSpec


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
