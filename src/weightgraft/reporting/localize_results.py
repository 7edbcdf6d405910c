"""localize.json: the schema of a minimal-graft search's results, shared by its writer
(`weightgraft.attribution.localize.LocalizeResult.summary`) and its reader (the report's
`localize_section`), so that the two cannot drift apart.

It lives with the report because `reporting` sits below `attribution`: the writer imports it
from here. Field order is the file's key order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

LOCALIZE_FILE = "localize.json"


class ChosenGroup(BaseModel):
    """One group of the minimal set: a role's positions, a layer (None: a model-level
    component such as the embedding) and a component (or `component#unit`)."""

    role: str
    layer: int | None
    component: str


class RecoveryInterval(BaseModel):
    """A recovery's 95% fact-clustered interval; value and bounds are NaN when undefined."""

    value: float
    low: float
    high: float
    defined: bool


class GraftCounts(BaseModel):
    """The chosen set against FE+LT with every layer and component, in groups and in cells."""

    chosen_groups: int
    fe_lt_groups: int
    chosen_cells_per_prompt: float
    fe_lt_cells_per_prompt: float
    all_cells_per_prompt: float


class LocalizeSummary(BaseModel):
    """What one minimal-graft search found (RUN/localize/NAME/localize.json).

    recovery, random_recovery_same_size: metric -> recovery of the chosen set and of a random
        set of its size (None when no set reached the target).
    baselines: PRE, SFT and FE+LT -> metric -> value (FE+LT also `recovery_<metric>`).
    intervals: chosen, random, FE+LT -> metric -> interval (files from before them: none).
    agreement: attribution against exact single-cell effects (`cell_agreement`'s keys; empty
        when not checked).
    """

    model_config = ConfigDict(extra="forbid")

    method: str
    target_recovery: float
    stop_on: list[str] = ["top5", "prob"]
    reached: bool
    chosen: list[ChosenGroup]
    recovery: dict[str, float] | None
    random_recovery_same_size: dict[str, float] | None
    baselines: dict[str, dict[str, float]]
    counts: GraftCounts
    examples: int
    intervals: dict[str, dict[str, RecoveryInterval]] = {}
    seconds: dict[str, float] = {}
    agreement: dict[str, Any] = {}
    notes: list[str] = []

    def to_json(self) -> str:
        """The file's text (indented, NaN written as NaN as Python's json does)."""
        return json.dumps(self.model_dump(), indent=2) + "\n"

    @classmethod
    def read(cls, path: str | Path) -> LocalizeSummary:
        """A localize.json file, checked against the schema."""
        return cls.model_validate(json.loads(Path(path).read_text()))
