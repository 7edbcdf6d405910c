"""One typed record per experiment: what a run leaves in `state/<experiment>.json`.

The runner builds it from the experiment's plan (`ExperimentRecord.from_plan`) and writes it
(`write`) before and after each result file; a merge of shards reads the shards' records and
writes the whole run's; the summary and the report read it once per experiment (`read`) and
pass it down. `to_json` is the state file's body exactly (`codec.dump`: keys in the order the
fields are declared, optional keys only when set), so the file's bytes do not depend on whether a
record or a dict wrote it, and `from_json` reads it back (`codec.load`) (older files, written before `wording`, `fidelity`,
`tied_embeddings`, `available_examples` or a graft's `layer_indices`, read with the defaults
that the report used for them).

A condition's `meta` stays a plain dict in the file: it is the condition language's open set of
tags (`grain`, `shape`, `reference`, `control`, sweep coordinates, ...). The record reads it once
into a typed `kind` (`condition_kind`), which is what the plots and the report go by.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Protocol

import weightgraft.codec as codec
from weightgraft.atomic import write_text_atomic
from weightgraft.experiments.condition_kind import ConditionKind, kind_of
from weightgraft.experiments.conditions import Condition, ConditionMethod
from weightgraft.experiments.config import ExperimentSpec
from weightgraft.experiments.example_rows import Example
from weightgraft.experiments.layers import concrete_layers
from weightgraft.experiments.run_folder import slug, state_file

Shard = tuple[int, int]


class PlannedRecipient(Protocol):
    """What a record reads of the planned recipient (`plan.types.PlannedModel`)."""

    num_layers: int
    tied: bool


class PlannedExperiment(Protocol):
    """What a record is built from: an experiment's plan (`plan.types.ExperimentPlan`), as far as
    the record reads it. A protocol, not the plan's type, because the plan reads the records
    (which results are already done), so the record sits below it and may not import it."""

    spec: ExperimentSpec
    recipient: PlannedRecipient
    conditions: list[Condition]
    examples: list[Example]
    available: int
    whole_fingerprints: dict[str, str]
    shard: Shard | None

    def my_examples(self) -> list[Example]: ...

    def digest(self) -> str: ...


@dataclass(frozen=True)
class GraftRecord:
    """One graft of a condition, as the report shows it.

    positions: the positions' text (`LT`, `FE+LT`, ...), as written.
    layers: the layer set as written (a band name, an int, a list of ints).
    components: the canonical components grafted.
    donor: the model (or shaped donor) the weights come from.
    heads, neurons: the units grafted when finer than a component; None: every unit.
    shape: the shaped donor's fields (`ShapeSpec.to_json`: scale, rank, top); None: the donor itself.
    random_positions: `{"seed", "draw"}` of a position control's draw; None: positions as written.
    layer_indices: the concrete layers `layers` meant on the recipient (None in older files):
    the report writes bands with the layers they covered here.
    """

    positions: str
    layers: Any
    components: tuple[str, ...]
    donor: str
    heads: Annotated[tuple | None, codec.OMIT_NONE] = None
    neurons: Annotated[tuple | None, codec.OMIT_NONE] = None
    shape: Annotated[dict | None, codec.OMIT_NONE] = None
    random_positions: Annotated[dict | None, codec.OMIT_NONE] = None
    layer_indices: Annotated[tuple[int, ...] | None, codec.OMIT_NONE] = None

    def to_json(self) -> dict:
        """The graft as the state file holds it (`ResolvedGraft.to_json` and its layer_indices)."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, body: dict) -> GraftRecord:
        return codec.load(cls, body)


@dataclass(frozen=True)
class ConditionRecord:
    """One condition of an experiment, resolved on its recipient.

    name: the row's name in every table, plot and summary row.
    recipient, donor: the model scored and the condition's default donor (keys of the run's models).
    method: how the donor comes in (`weights` grafted, or `activations` patched).
    description: what the condition is, in words (the conditions' list of the report).
    meta: the condition's tags (sweep coordinates, `grain`, `shape`, `reference`, `control`,
    `of`, ...), as the state file holds them.
    kind: what the tags make the row (`condition_kind.kind_of`): how the plots and the finer
    sections find their rows; computed here, not stored.
    grafts: its grafts, with their concrete layers.
    fidelity: the definition it was computed in (`authors`, `clean`, `authors = clean`); "" outside
    the paper's presets (the key is then absent from the file).
    file: its result file's name under `examples/<experiment>/`.
    """

    name: str
    recipient: str
    donor: str
    method: ConditionMethod
    description: str
    meta: dict
    grafts: tuple[GraftRecord, ...]
    fidelity: Annotated[str, codec.OMIT_EMPTY] = field(default="", kw_only=True)
    file: str
    kind: Annotated[ConditionKind, codec.COMPUTED] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", kind_of(self.meta))

    @classmethod
    def from_condition(cls, cond: Condition, num_layers: int) -> ConditionRecord:
        """A planned condition, its grafts' layers made concrete on a model of `num_layers`."""
        grafts = []
        for body, resolved in zip(cond.to_json()["grafts"], cond.grafts):
            body["layer_indices"] = concrete_layers(resolved.layers, num_layers)
            grafts.append(GraftRecord.from_json(body))
        return cls(
            cond.name,
            cond.recipient,
            cond.donor,
            ConditionMethod(cond.method),
            cond.description,
            dict(cond.meta),
            tuple(grafts),
            f"{slug(cond.name)}.parquet",
            fidelity=cond.fidelity,
        )

    def to_json(self) -> dict:
        """The condition as the state file holds it (`Condition.to_json` and its file)."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, body: dict) -> ConditionRecord:
        return codec.load(cls, body)


@dataclass(frozen=True)
class MergedPlan:
    """What a shard records of the whole run, so that a merge can check its shards agree.

    examples: every example id of the experiment, in dataset order (the merged files' row order).
    fingerprints: condition -> the whole run's result fingerprint (the merged files carry it).
    plan: the digest of the experiment's whole-run plan (`ExperimentPlan.digest`); None in shards
    written before it was recorded (which still merge with each other).
    """

    examples: tuple[str, ...]
    fingerprints: dict[str, str]
    plan: Annotated[str | None, codec.OMIT_NONE] = None

    def to_json(self) -> dict:
        return codec.dump(self)

    @classmethod
    def from_json(cls, body: dict) -> MergedPlan:
        return codec.load(cls, body)


@dataclass(frozen=True, kw_only=True)
class ExperimentRecord:
    """One experiment of a run, as its state file holds it: what the summary and the report read.

    name: the experiment's name (its files are named after it).
    title, description: its heading and paragraph in the report (title: the name when unset).
    dataset, recipient, donor: the keys of its dataset and default models in the run config.
    headline: the metrics its plots and its per-template tables show (the first one alone there).
    plot: its chart (`bars`, `heatmap` or `paired`).
    num_layers: the recipient's layers: the report writes bands as the layers they meant.
    fidelity: the experiment's definition setting (`authors`, `clean`, `both`; "" unset).
    wording: the wording of the paper's sentences its prompts used (`clean` or `authors`).
    tied_embeddings: the recipient ties its unembedding to its embedding (which head scored the
    authors' rows); None in files written before it was recorded.
    conditions: every condition, resolved, in the experiment's order.
    examples: the ids of the examples this process scored (a shard: its share), dataset order.
    available_examples: how many prompts it could have scored (before `max_examples`).
    templates: the evaluation templates of its examples, sorted.
    result_sha256: result file name -> its sha256 when written: a damaged file is recomputed.
    scored_after_whitespace: example id -> note, for targets scored at a later token than their
    first (the first is whitespace alone); empty when none (the key is then absent).
    scored_units: example id -> how many tokens its scored unit holds, for targets whose first
    character the tokenizer splits over several tokens (`data.encode`); empty when none (the key
    is then absent).
    shard: (I, N) of a shard's record; None for a whole run.
    merged: a shard's view of the whole run (None for a whole run).

    The fields are declared in the state file's key order (keyword-only, so that defaults may
    sit between required fields).
    """

    name: str
    title: str
    description: str
    dataset: str
    recipient: str
    donor: str
    headline: tuple[str, ...]
    plot: str
    num_layers: int
    fidelity: str = ""
    wording: str = "clean"
    tied_embeddings: Annotated[bool | None, codec.OMIT_NONE] = None
    conditions: tuple[ConditionRecord, ...]
    examples: tuple[str, ...]
    available_examples: int = 0
    templates: tuple[str, ...]
    result_sha256: dict[str, str] = field(default_factory=dict)
    scored_after_whitespace: Annotated[dict[str, str], codec.OMIT_EMPTY] = field(default_factory=dict)
    scored_units: Annotated[dict[str, int], codec.OMIT_EMPTY] = field(default_factory=dict)
    shard: Annotated[Shard | None, codec.OMIT_NONE] = None
    merged: Annotated[MergedPlan | None, codec.OMIT_NONE] = None

    @property
    def labelled(self) -> bool:
        """Whether its rows name their definition (a paper preset's): tables add a column then."""
        return any(c.fidelity for c in self.conditions)

    @classmethod
    def from_plan(cls, plan: PlannedExperiment) -> ExperimentRecord:
        """The record of a planned experiment before any result file is written (no sha256):
        for a shard, its share of the examples and what the merged files will be."""
        spec, n = plan.spec, plan.recipient.num_layers
        mine = plan.my_examples()
        merged = None
        if plan.shard is not None:
            whole = tuple(e.prompt.id for e in plan.examples)
            merged = MergedPlan(whole, dict(plan.whole_fingerprints), plan.digest())
        return cls(
            name=spec.name,
            title=spec.title or spec.name,
            description=spec.description,
            dataset=spec.dataset,
            recipient=spec.recipient,
            donor=spec.donor,
            headline=tuple(spec.headline),
            plot=spec.plot,
            num_layers=n,
            conditions=tuple(ConditionRecord.from_condition(c, n) for c in plan.conditions),
            examples=tuple(e.prompt.id for e in mine),
            templates=tuple(sorted({e.prompt.template_id for e in mine})),
            fidelity=spec.fidelity or "",
            wording=spec.wording,
            tied_embeddings=plan.recipient.tied,
            available_examples=plan.available,
            scored_after_whitespace={e.prompt.id: e.note for e in mine if e.scored},
            scored_units={e.prompt.id: e.unit for e in mine if e.unit != 1},
            shard=plan.shard,
            merged=merged,
        )

    def with_results(self, sha256: dict[str, str]) -> ExperimentRecord:
        """The record with these result files' sha256 (a copy: the caller keeps adding to its own)."""
        return replace(self, result_sha256=dict(sha256))

    def to_json(self) -> dict:
        """The state file's body, key for key and in its order."""
        return codec.dump(self)

    @classmethod
    def from_json(cls, body: dict) -> ExperimentRecord:
        """A state file's body as a record (older files' missing keys take their defaults)."""
        return codec.load(cls, body)

    def dumps(self) -> str:
        """The state file's text."""
        return json.dumps(self.to_json(), indent=2)

    def write(self, out: Path, shard: Shard | None = None) -> Path:
        """Write the record as `state/<name>[.shard-I-of-N].json` in the run folder `out` (atomic)."""
        return write_text_atomic(state_file(out, self.name, shard), self.dumps())

    @classmethod
    def read(cls, out: Path, name: str, shard: Shard | None = None) -> ExperimentRecord:
        """The record of experiment `name` in the run folder `out` (a shard's with `shard`)."""
        return cls.from_json(json.loads(state_file(out, name, shard).read_text()))


def recorded_result_hashes(out: Path, experiment: str, shard: Shard | None = None) -> dict[str, str] | None:
    """{result file name: sha256} from the experiment's record; None when the state file is
    missing or unreadable (results are then checked by their page checksums alone)."""
    try:
        return ExperimentRecord.read(out, experiment, shard).result_sha256
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
