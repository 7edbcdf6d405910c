"""The experiment runner: conditions x examples, batched, resumable, written atomically.

Resuming: a condition whose result file exists and carries the same fingerprint (condition,
models, dataset, examples, dtype) is not recomputed. Conditions that share recipient, donor and
method are computed together in fixed chunks (`conditions_per_chunk`, in the experiment's order);
rows of one forward pass are (example, condition) pairs: every condition of the chunk for one of
the experiment's fixed batches of examples, so that prefix sharing splits them the same way in
every run.

Sharding (`shard=(I, N)`, from `--shard I/N` or torchrun's RANK/WORLD_SIZE): the shard takes
batches I, I+N, I+2N, ... of the experiment's fixed example batches (`execute.example_batches`)
and writes its own files (`*.shard-I-of-N.*`); `shards.merge_shards` joins them into the files
of a whole run. Every batch is computed as in a single-process run, so the merged results equal
that run's bit for bit.

The folder layout and file formats are in `records`; the computation is in `execute`. The
runner knows nothing of summaries or reports: `weightgraft.pipelines` calls it, then them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tqdm.auto import tqdm

from weightgraft.adapters import adapter_for
from weightgraft.errors import warn
from weightgraft.experiments import records
from weightgraft.experiments.config import ExperimentSpec, RunConfig
from weightgraft.experiments.execute import (
    Resources,
    compute_chunk,
    encode_examples,
    example_batches,
)
from weightgraft.experiments.plan import ModelFacts, experiment_conditions, layer_indices, ties_embeddings
from weightgraft.experiments.preflight import check_before_loading
from weightgraft.experiments.records import slug  # noqa: F401  (re-exported for callers)


@dataclass
class RunResult:
    out: Path
    computed: list[str] = field(default_factory=list)  # "experiment/condition" done this session
    reused: list[str] = field(default_factory=list)
    damaged: list[Path] = field(default_factory=list)  # files found damaged and recomputed
    seconds: float = 0.0


class Runner:
    """Runs a validated RunConfig into a folder."""

    def __init__(
        self, config: RunConfig, out: str | Path, *, progress: bool = True, shard: tuple[int, int] | None = None
    ):
        self.config = config
        self.out = Path(out)
        self.progress = progress
        self.shard = shard
        if not progress:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        self.resources = Resources(config)

    def run(self) -> RunResult:
        start = time.perf_counter()
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        check_before_loading(self.config)  # bad paths, layers, devices fail here, in one line
        with records.run_folder(self.out, self.shard):
            return self._run(start, started_at)

    def _run(self, start: float, started_at: str) -> RunResult:
        experiments = self.config.expanded()
        keys = {k for e in experiments for k in (e.recipient, e.donor)}
        for exp in experiments:
            for item in exp.conditions:
                if not isinstance(item, str):
                    keys |= {k for k in (item.recipient, item.donor, *(g.donor for g in item.grafts)) if k}
        # Encoded once before any weights load: a prompt past a model's context, an empty
        # target or a span off the tokens fails here, in one line (the tokenizer is cached).
        checked = set()
        for exp in experiments:
            key = (exp.dataset, repr(exp.templates), exp.max_examples, repr(exp.directions), exp.recipient)
            if key not in checked:  # presets share their prompts: encode each choice once
                checked.add(key)
                encode_examples(self.resources, exp, self.resources.tokenizer(sorted(keys)))
        self.out.mkdir(parents=True, exist_ok=True)
        datasets = {e.dataset for e in experiments}
        body = records.provenance(self.config, {k: self.resources.model_info(k) for k in keys}, datasets)
        result = RunResult(out=self.out)
        # run.json first, so that a killed run leaves a record (its session stays `running`).
        session = {"started": started_at, "status": "running"}
        if self.shard is not None:
            body["shard"] = list(self.shard)
        body.update(status="running", sessions=[*records.previous_sessions(self.out, self.shard), session])
        records.write_run_json(self.out, body, self.shard)
        try:
            tokenizer = self.resources.tokenizer(sorted(keys))
            for exp in experiments:
                self.run_experiment(exp, tokenizer, result)
        except BaseException:
            session.update(status="interrupted", computed=len(result.computed), reused=len(result.reused))
            records.write_run_json(self.out, dict(body, status="interrupted"), self.shard)
            raise
        result.seconds = time.perf_counter() - start
        session.update(
            status="complete",
            seconds=round(result.seconds, 2),
            finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            computed=len(result.computed),
            reused=len(result.reused),
        )
        records.write_run_json(self.out, dict(body, status="complete"), self.shard)
        return result

    def run_experiment(self, exp: ExperimentSpec, tokenizer, result: RunResult) -> None:
        res = self.resources
        recipient = res.model(exp.recipient)
        num_layers = recipient.config.get_text_config().num_hidden_layers
        facts = ModelFacts(adapter_for(recipient).components, ties_embeddings(recipient))
        conditions = experiment_conditions(exp, num_layers, facts)
        examples, available = encode_examples(res, exp, tokenizer)
        every_example = examples
        batches = example_batches(
            res, exp.recipient, every_example, min(self.config.conditions_per_chunk, len(conditions))
        )

        def computation(of: list) -> dict:
            return {
                "device": torch_device_type(self.config.device),
                "conditions_per_chunk": self.config.conditions_per_chunk,
                "batches": [[e.prompt.id for e in batch] for batch in of],
            }

        whole = computation(batches)
        if self.shard is not None:
            batches = batches[self.shard[0] :: self.shard[1]]
            mine = {e.prompt.id for batch in batches for e in batch}
            examples = [e for e in every_example if e.prompt.id in mine]
        known = records.recorded_result_hashes(self.out, exp.name, self.shard)
        pattern = f"*{records.shard_tag(self.shard)}.parquet" if self.shard else "*.parquet"
        if known is None and any(records.results_folder(self.out, exp.name).glob(pattern)):
            warn(
                f"{records.state_file(self.out, exp.name, self.shard)} is missing or unreadable; "
                "rewriting it, and checking the results by their page checksums alone"
            )
        known = known or {}
        state = {
            "name": exp.name,
            "title": exp.title or exp.name,
            "description": exp.description,
            "dataset": exp.dataset,
            "recipient": exp.recipient,
            "donor": exp.donor,
            "headline": exp.headline,
            "plot": exp.plot,
            "num_layers": num_layers,
            "fidelity": exp.fidelity or "",
            "wording": exp.wording,
            "tied_embeddings": facts.tied,
            "conditions": [condition_state(c, num_layers) for c in conditions],
            "examples": [e.prompt.id for e in examples],
            "available_examples": available,
            "templates": sorted({e.prompt.template_id for e in examples}),
            "result_sha256": {},
        }
        if self.shard is not None:  # what the merged files will be: all examples, their prints
            state["shard"] = list(self.shard)
            state["merged"] = {"examples": [e.prompt.id for e in every_example], "fingerprints": {}}
        pending = set()
        fingerprints = {}
        example_ids = [e.prompt.id for e in examples]
        for cond in conditions:
            model_prints = {k: res.fingerprint(k) for k in (cond.recipient, *cond.donors)}
            fp = records.condition_fingerprint(
                cond.to_json(), self.config.dtype, model_prints, examples, computation(batches)
            )
            if self.shard is not None:
                state["merged"]["fingerprints"][cond.name] = records.condition_fingerprint(
                    cond.to_json(), self.config.dtype, model_prints, every_example, whole
                )
            path = records.condition_file(self.out, exp.name, cond.name, self.shard)
            problem = records.reuse_problem(path, fp, example_ids, known.get(path.name))
            if problem is None:
                result.reused.append(f"{exp.name}/{cond.name}")
                state["result_sha256"][path.name] = known.get(path.name) or records.sha256_file(path)
            else:
                if problem[0] == "damaged":
                    warn(f"{path} is damaged ({problem[1]}); recomputing it")
                    result.damaged.append(path)
                pending.add(cond.name)
            fingerprints[cond.name] = fp
        records.write_state(self.out, state, self.shard)
        # Chunks are fixed by the experiment's conditions, not by what is pending: a chunk with
        # any pending condition is computed whole (the same forwards as an uninterrupted run)
        # and only its pending conditions are written.
        groups: dict[tuple, list] = {}
        for cond in conditions:
            groups.setdefault((cond.recipient, cond.donors, cond.method), []).append((cond, fingerprints[cond.name]))
        per_chunk = self.config.conditions_per_chunk
        chunks = [items[i : i + per_chunk] for items in groups.values() for i in range(0, len(items), per_chunk)]
        chunks = [chunk for chunk in chunks if any(c.name in pending for c, _ in chunk)]
        total = sum(len(chunk) for chunk in chunks) * len(examples)
        with tqdm(total=total, desc=exp.name, unit="row", disable=not self.progress or total == 0, leave=False) as bar:
            for chunk in chunks:
                # A shard can be left without batches when N exceeds their number.
                rows = compute_chunk(res, exp, [c for c, _ in chunk], batches, tokenizer, bar)
                order = {e.prompt.id: i for i, e in enumerate(examples)}
                for cond, _ in chunk:  # dataset order, whatever the batching did
                    rows[cond.name].sort(key=lambda r: order[r["example_id"]])
                for cond, fp in chunk:
                    if cond.name not in pending:
                        continue
                    path = records.condition_file(self.out, exp.name, cond.name, self.shard)
                    state["result_sha256"][path.name] = records.write_condition(path, rows[cond.name], fp)
                    records.write_state(self.out, state, self.shard)
                    result.computed.append(f"{exp.name}/{cond.name}")


def torch_device_type(device: str) -> str:
    """cpu, cuda, mps: results differ between kinds of device, not between two GPUs of a kind."""
    return device.split(":")[0]


def condition_state(cond, num_layers: int) -> dict:
    """A condition as the report reads it: its grafts with the concrete layers they cover."""
    body = cond.to_json()
    for graft, resolved in zip(body["grafts"], cond.grafts):
        graft["layer_indices"] = layer_indices(resolved.layers, num_layers)
    return dict(body, file=f"{slug(cond.name)}.parquet")


def run_experiments(
    config: RunConfig, out: str | Path, *, progress: bool = True, shard: tuple[int, int] | None = None
) -> RunResult:
    """Run every experiment of `config` into `out` (only shard I of N of the examples when
    `shard=(I, N)`), resuming what is already there. The summary and report are the reporting
    layer's (see `weightgraft.pipelines.run_all`)."""
    return Runner(config, out, progress=progress, shard=shard).run()
