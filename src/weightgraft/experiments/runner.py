"""The experiment runner: a loop over the plan's pending chunks, written atomically.

`plan.build_plan` resolves the whole run before any weights load (its preflight): conditions,
examples, fixed batches, fixed chunks and each result file's fingerprint. The runner then, per
experiment, reuses what the folder already holds (`ExperimentPlan.status`: a result file whose
fingerprint and sha256 match), writes the state file, and computes the pending chunks: a chunk
with any pending condition is computed whole (the same forwards as an uninterrupted run) and
only its pending conditions are written.

Sharding (`shard=(I, N)`, from `--shard I/N` or torchrun's RANK/WORLD_SIZE): the shard takes
batches I, I+N, I+2N, ... of the experiment's fixed example batches and writes its own files
(`*.shard-I-of-N.*`); `shards.merge_shards` joins them into the files of a whole run. Every
batch is computed as in a single-process run, so the merged results equal that run's bit for bit.

The folder layout is in `run_folder`, the result files in `result_files`, run.json in
`run_json`; a chunk's computation in `execute` and `methods`. The runner knows nothing of
summaries or reports: `weightgraft.pipelines` calls it, then them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tqdm.auto import tqdm
from transformers.utils import logging as hf_logging

from weightgraft.errors import warn
from weightgraft.experiments import result_files, run_folder, run_json
from weightgraft.experiments.conditions import Condition
from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.execute import Resources, compute_chunk
from weightgraft.experiments.methods import ChunkMethod, method_for
from weightgraft.experiments.plan import Chunk, ExperimentPlan, RunPlan, Shard, build_plan
from weightgraft.experiments.record import ExperimentRecord


@dataclass
class RunResult:
    out: Path
    computed: list[str] = field(default_factory=list)  # "experiment/condition" done this session
    reused: list[str] = field(default_factory=list)
    damaged: list[Path] = field(default_factory=list)  # files found damaged and recomputed
    seconds: float = 0.0
    plan: RunPlan | None = None  # what was run
    # Each finished experiment's record as written to state/ (the plan's, with its results'
    # sha256), in the plan's order: what the summary reads, without reading the folder again.
    records: list[ExperimentRecord] = field(default_factory=list)
    # run.json's body as this session last wrote it (provenance and sessions): what the report
    # shows, without reading the file back.
    provenance: dict = field(default_factory=dict)


class Runner:
    """Runs a validated RunConfig into a folder (shard I of N of it when `shard=(I, N)`)."""

    def __init__(self, config: RunConfig, out: str | Path, *, progress: bool = True, shard: Shard | None = None):
        self.config = config
        self.out = Path(out)
        self.progress = progress
        self.shard = shard
        if not progress:
            hf_logging.disable_progress_bar()
        self.resources = Resources(config)

    def plan(self) -> RunPlan:
        """The run's plan; bad paths, layers, devices and prompts fail here, before any weights."""
        return build_plan(self.config, self.resources, self.shard)

    def run(self) -> RunResult:
        start = time.perf_counter()
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        plan = self.plan()
        with run_folder.run_folder(self.out, self.shard):
            return self._run(plan, start, started_at)

    def _run(self, plan: RunPlan, start: float, started_at: str) -> RunResult:
        """run.json first (a killed run leaves a record: its session stays `running`), then the
        experiments, then run.json again with how the session ended."""
        self.out.mkdir(parents=True, exist_ok=True)
        datasets = {e.spec.dataset for e in plan.experiments}
        body = run_json.provenance(self.config, {k: self.resources.model_info(k) for k in plan.models}, datasets)
        result = RunResult(out=self.out, plan=plan)
        session = {"started": started_at, "status": "running"}
        if self.shard is not None:
            body["shard"] = list(self.shard)
        body.update(status="running", sessions=[*run_json.previous_sessions(self.out, self.shard), session])
        run_json.write_run_json(self.out, body, self.shard)
        try:
            for exp in plan.experiments:
                self.run_experiment(plan, exp, result)
        except BaseException:
            session.update(status="interrupted", computed=len(result.computed), reused=len(result.reused))
            run_json.write_run_json(self.out, dict(body, status="interrupted"), self.shard)
            raise
        result.seconds = time.perf_counter() - start
        session.update(
            status="complete",
            seconds=round(result.seconds, 2),
            finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            computed=len(result.computed),
            reused=len(result.reused),
        )
        result.provenance = dict(body, status="complete")
        run_json.write_run_json(self.out, result.provenance, self.shard)
        return result

    def run_experiment(self, plan: RunPlan, exp: ExperimentPlan, result: RunResult) -> None:
        """One experiment: reuse what is on disk, write its state file, compute what is pending."""
        status = exp.status(self.out)
        if status.state_unreadable:
            warn(
                f"{run_folder.state_file(self.out, exp.name, self.shard)} is missing or unreadable; "
                "rewriting it, and checking the results by their page checksums alone"
            )
        for path, why in status.damaged:
            warn(f"{path} is damaged ({why}); recomputing it")
        result.damaged.extend(path for path, _ in status.damaged)
        result.reused.extend(f"{exp.name}/{name}" for name in status.reused)
        record, written = ExperimentRecord.from_plan(exp), dict(status.sha256)
        record.with_results(written).write(self.out, self.shard)
        # The models load here, before the progress bar: a model that cannot load is one line.
        methods = [self.method(plan, [exp.condition(name) for name in chunk.conditions]) for chunk in status.pending]
        decode = self.resources.tokenizer(sorted(plan.models)).decode
        total = sum(len(chunk.conditions) for chunk in status.pending) * len(exp.my_examples())
        with tqdm(total=total, desc=exp.name, unit="row", disable=not self.progress or total == 0, leave=False) as bar:
            for chunk, method in zip(status.pending, methods):
                self.compute(exp, chunk, method, decode, record, written, bar, result)
        result.records.append(record.with_results(written))

    def method(self, plan: RunPlan, chunk: list[Condition]) -> ChunkMethod:
        """How a chunk's conditions are computed, on the run's models: one Grafter with every
        donor (shaped ones included) that the chunk reads."""
        pad = self.resources.tokenizer(sorted(plan.models)).pad_token_id
        first, donors = chunk[0], tuple(sorted({d for cond in chunk for d in cond.donor_sources}))
        return method_for(self.resources, first, plan.models[first.recipient].tied, 0 if pad is None else pad, donors)

    def compute(
        self,
        exp: ExperimentPlan,
        chunk: Chunk,
        method: ChunkMethod,
        decode,
        record: ExperimentRecord,
        written: dict[str, str],
        bar,
        result: RunResult,
    ) -> None:
        """One chunk: its conditions computed together, its pending ones written (and the
        experiment's record after each, with `written`, the sha256 of its result files so far,
        which this adds to: an interrupted run keeps what it finished)."""
        conditions = [exp.condition(name) for name in chunk.conditions]
        # A shard can be left without batches when N exceeds their number.
        rows = compute_chunk(method, exp.name, conditions, exp.my_batches(), decode, bar)
        order = {e.prompt.id: i for i, e in enumerate(exp.my_examples())}
        for cond in conditions:
            if cond.name not in chunk.pending:
                continue
            rows[cond.name].sort(key=lambda r: order[r.example_id])  # dataset order
            path = run_folder.condition_file(self.out, exp.name, cond.name, self.shard)
            fingerprint = exp.fingerprints[cond.name]
            written[path.name] = result_files.write_condition(path, rows[cond.name], fingerprint)
            record.with_results(written).write(self.out, self.shard)
            result.computed.append(f"{exp.name}/{cond.name}")


def run_experiments(
    config: RunConfig, out: str | Path, *, progress: bool = True, shard: tuple[int, int] | None = None
) -> RunResult:
    """Run every experiment of `config` into `out` (only shard I of N of the examples when
    `shard=(I, N)`), resuming what is already there. The summary and report are the reporting
    layer's (see `weightgraft.pipelines.run_all`)."""
    return Runner(config, out, progress=progress, shard=shard).run()
