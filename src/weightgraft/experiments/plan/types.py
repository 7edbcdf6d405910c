"""The run plan: everything a run will compute, resolved from the configs before any weights load.

`build.build_plan` makes a `RunPlan` from the run config and the models' config.json files
(building it is the run's preflight); the runner then computes `ExperimentPlan.status(out)`'s
pending chunks, and writes each experiment's state file, the record `record.ExperimentRecord.from_plan`
builds from its plan.

Per experiment the plan holds its conditions (resolved on the recipient: concrete layers,
recipient and donors), every example it scores (encoded), the fixed example batches, the fixed
chunks of conditions, and each condition's fingerprint: this process's (its shard's examples and
batches) and the whole run's (what `shards.merge_shards` writes). A plan is plain data: `to_json`
and `RunPlan.from_json` round-trip it, and `digest` names an experiment's whole-run plan, which
every shard records so that a merge refuses shards made under different plans.

Resuming is `status(out)`: the result files on disk that match their fingerprint (and the sha256
the state file recorded) are reused; a chunk holding any other condition is computed whole (the
same forwards as an uninterrupted run) and only its pending conditions are written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import weightgraft.codec as codec
from weightgraft.data.schema import EvalPrompt
from weightgraft.engine.units import UnitSpec
from weightgraft.experiments import result_files, run_folder
from weightgraft.experiments.conditions import Condition, ConditionMethod, DrawnPositions, ResolvedGraft, ShapeSpec
from weightgraft.experiments.conditions.position_roles import parse_positions
from weightgraft.experiments.config import ExperimentSpec, RunConfig, parse_config
from weightgraft.experiments.example_rows import Example
from weightgraft.experiments.record import recorded_result_hashes
from weightgraft.runtime import sha256_file, sha256_json

Shard = tuple[int, int]


@dataclass(frozen=True)
class PlannedModel:
    """One model of the run, as its config.json and files describe it (no weights)."""

    key: str
    path: str
    sha256: str  # the fingerprint of its files (`models.fingerprint_model`)
    num_layers: int
    vocab_size: int
    components: tuple[str, ...]  # the canonical components of its architecture
    tied: bool  # its unembedding is its token embedding
    model_type: str = ""
    # component -> [kind, side, count, width] of its heads or neurons (`engine.units.UnitSpec`)
    units: dict = field(default_factory=dict)
    # component -> [rows, cols] of its module's smallest 2-D weight (a fused module's whole matrix)
    matrices: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return codec.dump(self)

    def unit_specs(self) -> dict[str, UnitSpec]:
        """How each head and neuron component divides into units, as the engine reads it."""
        return {comp: UnitSpec(*spec) for comp, spec in self.units.items()}

    @classmethod
    def from_json(cls, body: dict) -> PlannedModel:
        return codec.load(cls, body)


@dataclass(frozen=True)
class Chunk:
    """Conditions computed in one set of forwards (same recipient, donors and method), and
    which of them are to be written (`pending`; the others are reused from disk)."""

    experiment: str
    conditions: tuple[str, ...]
    pending: frozenset[str] = frozenset()


@dataclass
class Status:
    """What a run folder already holds for one experiment."""

    sha256: dict[str, str]  # result file name -> sha256, for every reusable file
    reused: list[str]  # condition names
    damaged: list[tuple[Path, str]]  # (file, why): recomputed
    pending: list[Chunk]  # chunks holding a condition to compute
    state_unreadable: bool  # result files exist, but their state file does not say their sha256


@dataclass
class ExperimentPlan:
    """One experiment's resolved work (see the module's docstring)."""

    spec: ExperimentSpec
    recipient: PlannedModel
    conditions: list[Condition]
    examples: list[Example]  # every example the experiment scores, in dataset order
    available: int  # how many prompts it could have scored (before `max_examples`)
    batches: list[list[str]]  # every fixed batch, as example ids
    chunks: list[tuple[str, ...]]  # condition names, each chunk computed together
    fingerprints: dict[str, str]  # condition -> this process's result fingerprint
    whole_fingerprints: dict[str, str]  # condition -> the whole run's (merged) fingerprint
    shard: Shard | None = None
    computation: dict = field(default_factory=dict)  # device type and conditions per chunk

    @property
    def name(self) -> str:
        return self.spec.name

    def condition(self, name: str) -> Condition:
        return next(c for c in self.conditions if c.name == name)

    def my_batches(self) -> list[list[Example]]:
        """The batches this process computes: all of them, or a shard's I, I+N, ..."""
        by_id = {e.prompt.id: e for e in self.examples}
        batches = [[by_id[i] for i in batch] for batch in self.batches]
        return batches if self.shard is None else batches[self.shard[0] :: self.shard[1]]

    def my_examples(self) -> list[Example]:
        """This process's examples, in dataset order."""
        mine = {e.prompt.id for batch in self.my_batches() for e in batch}
        return [e for e in self.examples if e.prompt.id in mine]

    def file(self, condition: str) -> str:
        """The name of a condition's result file in this process (`*.shard-I-of-N.parquet`)."""
        return f"{run_folder.slug(condition)}{run_folder.shard_tag(self.shard)}.parquet"

    def digest(self) -> str:
        """The whole-run plan of this experiment, shard left out: equal in every shard of a run."""
        body = self.to_json()
        return sha256_json({k: v for k, v in body.items() if k not in ("shard", "fingerprints")})

    def status(self, out: Path) -> Status:
        """What of this experiment `out` already holds, and the chunks left to compute."""
        known = recorded_result_hashes(out, self.name, self.shard)
        pattern = f"*{run_folder.shard_tag(self.shard)}.parquet" if self.shard else "*.parquet"
        unreadable = known is None and any(run_folder.results_folder(out, self.name).glob(pattern))
        known = known or {}
        ids = [e.prompt.id for e in self.my_examples()]
        sha256, reused, damaged, todo = {}, [], [], set()
        for cond in self.conditions:
            path = run_folder.condition_file(out, self.name, cond.name, self.shard)
            problem = result_files.reuse_problem(path, self.fingerprints[cond.name], ids, known.get(path.name))
            if problem is None:
                reused.append(cond.name)
                sha256[path.name] = known.get(path.name) or sha256_file(path)
                continue
            if problem[0] == "damaged":
                damaged.append((path, problem[1]))
            todo.add(cond.name)
        pending = [Chunk(self.name, chunk, frozenset(todo & set(chunk))) for chunk in self.chunks if todo & set(chunk)]
        return Status(sha256, reused, damaged, pending, unreadable)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "recipient": self.recipient.key,
            "shard": list(self.shard) if self.shard else None,
            "computation": self.computation,
            "conditions": [c.to_json() for c in self.conditions],
            "examples": [example_json(e) for e in self.examples],
            "available": self.available,
            "batches": self.batches,
            "chunks": [list(c) for c in self.chunks],
            "fingerprints": self.fingerprints,
            "whole_fingerprints": self.whole_fingerprints,
        }

    @classmethod
    def from_json(cls, body: dict, spec: ExperimentSpec, models: dict[str, PlannedModel]) -> ExperimentPlan:
        return cls(
            spec=spec,
            recipient=models[body["recipient"]],
            conditions=[condition_from_json(c) for c in body["conditions"]],
            examples=[example_from_json(e) for e in body["examples"]],
            available=body["available"],
            batches=[list(b) for b in body["batches"]],
            chunks=[tuple(c) for c in body["chunks"]],
            fingerprints=dict(body["fingerprints"]),
            whole_fingerprints=dict(body["whole_fingerprints"]),
            shard=tuple(body["shard"]) if body["shard"] else None,
            computation=dict(body["computation"]),
        )


@dataclass
class RunPlan:
    """Every experiment of one run (one shard of it when `shard` is set), resolved."""

    config: RunConfig
    models: dict[str, PlannedModel]
    experiments: list[ExperimentPlan]
    shard: Shard | None = None

    def experiment(self, name: str) -> ExperimentPlan:
        return next(e for e in self.experiments if e.name == name)

    def pending(self, out: Path) -> list[Chunk]:
        """The chunks a run into `out` still has to compute, in the order it computes them."""
        return [chunk for exp in self.experiments for chunk in exp.status(Path(out)).pending]

    def to_json(self) -> dict:
        return {
            "config": self.config.model_dump(mode="json"),
            "shard": list(self.shard) if self.shard else None,
            "models": {k: m.to_json() for k, m in sorted(self.models.items())},
            "experiments": [e.to_json() for e in self.experiments],
        }

    @classmethod
    def from_json(cls, body: dict) -> RunPlan:
        config = parse_config(body["config"])
        models = {k: PlannedModel.from_json(m) for k, m in body["models"].items()}
        specs = {e.name: e for e in config.expanded()}
        experiments = [ExperimentPlan.from_json(e, specs[e["name"]], models) for e in body["experiments"]]
        return cls(config, models, experiments, tuple(body["shard"]) if body["shard"] else None)


def condition_from_json(body: dict) -> Condition:
    """The inverse of `Condition.to_json`."""
    return Condition(
        name=body["name"],
        recipient=body["recipient"],
        donor=body["donor"],
        method=ConditionMethod(body["method"]),
        grafts=[graft_from_json(g) for g in body["grafts"]],
        description=body["description"],
        meta=dict(body["meta"]),
        fidelity=body.get("fidelity", ""),
    )


def graft_from_json(body: dict) -> ResolvedGraft:
    """The inverse of `ResolvedGraft.to_json`."""
    positions = parse_positions(body["positions"])
    if "random_positions" in body:
        positions = DrawnPositions(positions, body["random_positions"]["seed"], body["random_positions"]["draw"])
    return ResolvedGraft(
        positions,
        body["layers"],
        list(body["components"]),
        body["donor"],
        heads=body.get("heads"),
        neurons=body.get("neurons"),
        shape=ShapeSpec(**body["shape"]) if "shape" in body else None,
    )


def example_json(example: Example) -> dict:
    body = {
        "prompt": example.prompt.model_dump(mode="json"),
        "input_ids": example.input_ids,
        "target_ids": example.target_ids,
        "positions": example.positions,
    }
    if example.scored or example.unit != 1:  # only then, so that plans of ordinary targets keep their digest
        body.update(scored=example.scored, note=example.note)
    if example.unit != 1:
        body["unit"] = example.unit
    return body


def example_from_json(body: dict) -> Example:
    return Example(
        EvalPrompt.model_validate(body["prompt"]),
        list(body["input_ids"]),
        list(body["target_ids"]),
        {k: list(v) for k, v in body["positions"].items()},
        int(body.get("scored", 0)),
        str(body.get("note", "")),
        int(body.get("unit", 1)),
    )
