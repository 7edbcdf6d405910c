"""The experiment runner: conditions x examples, batched, resumable, written atomically.

Resuming: a condition whose result file exists and carries the same fingerprint (condition,
models, dataset, examples, dtype) is not recomputed. Conditions that share recipient, donor and
method are computed together in chunks; rows of one forward pass are (example, condition) pairs,
so a batch holds every pending condition of the chunk for a handful of examples.

The folder layout and file formats are in `records`; the computation is in `execute`. The
runner knows nothing of summaries or reports: `weightgraft.pipelines` calls it, then them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tqdm.auto import tqdm

from weightgraft.experiments import records
from weightgraft.experiments.config import ExperimentSpec, RunConfig
from weightgraft.experiments.execute import Resources, compute_chunk, encode_examples
from weightgraft.experiments.plan import experiment_conditions, layer_indices
from weightgraft.experiments.records import slug  # noqa: F401  (re-exported for callers)


@dataclass
class RunResult:
    out: Path
    computed: list[str] = field(default_factory=list)  # "experiment/condition" done this session
    reused: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Runner:
    """Runs a validated RunConfig into a folder."""

    def __init__(self, config: RunConfig, out: str | Path, *, progress: bool = True):
        self.config = config
        self.out = Path(out)
        self.progress = progress
        if not progress:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        self.resources = Resources(config)

    def run(self) -> RunResult:
        start = time.perf_counter()
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.out.mkdir(parents=True, exist_ok=True)
        experiments = self.config.expanded()
        keys = {k for e in experiments for k in (e.recipient, e.donor)}
        for exp in experiments:
            for item in exp.conditions:
                if not isinstance(item, str):
                    keys |= {k for k in (item.recipient, item.donor, *(g.donor for g in item.grafts))
                             if k}
        datasets = {e.dataset for e in experiments}
        tokenizer = self.resources.tokenizer(sorted(keys))
        body = records.provenance(self.config, {k: self.resources.model_info(k) for k in keys},
                                  datasets)
        result = RunResult(out=self.out)
        sessions = records.previous_sessions(self.out)
        for exp in experiments:
            self.run_experiment(exp, tokenizer, result)
        result.seconds = time.perf_counter() - start
        sessions.append({"started": started_at, "seconds": round(result.seconds, 2),
                         "computed": len(result.computed), "reused": len(result.reused)})
        body["sessions"] = sessions
        records.write_run_json(self.out, body)
        return result

    def run_experiment(self, exp: ExperimentSpec, tokenizer, result: RunResult) -> None:
        res = self.resources
        num_layers = res.model(exp.recipient).config.get_text_config().num_hidden_layers
        conditions = experiment_conditions(exp, num_layers)
        examples, available = encode_examples(res, exp, tokenizer)
        records.write_state(self.out, {
            "name": exp.name, "title": exp.title or exp.name, "description": exp.description,
            "dataset": exp.dataset, "recipient": exp.recipient, "donor": exp.donor,
            "headline": exp.headline, "plot": exp.plot, "num_layers": num_layers,
            "conditions": [condition_state(c, num_layers) for c in conditions],
            "examples": [e.prompt.id for e in examples],
            "available_examples": available,
            "templates": sorted({e.prompt.template_id for e in examples}),
        })
        pending = []
        for cond in conditions:
            fp = records.condition_fingerprint(
                cond.to_json(), self.config.dtype,
                {k: res.fingerprint(k) for k in (cond.recipient, *cond.donors)}, examples)
            path = records.condition_file(self.out, exp.name, cond.name)
            if path.is_file() and records.stored_fingerprint(path) == fp:
                result.reused.append(f"{exp.name}/{cond.name}")
            else:
                pending.append((cond, fp))
        groups: dict[tuple, list] = {}
        for cond, fp in pending:
            groups.setdefault((cond.recipient, cond.donors, cond.method), []).append((cond, fp))
        per_chunk = self.config.conditions_per_chunk
        chunks = [items[i:i + per_chunk] for items in groups.values()
                  for i in range(0, len(items), per_chunk)]
        total = sum(len(chunk) for chunk in chunks) * len(examples)
        with tqdm(total=total, desc=exp.name, unit="row", disable=not self.progress or total == 0,
                  leave=False) as bar:
            for chunk in chunks:
                rows = compute_chunk(res, exp, [c for c, _ in chunk], examples, tokenizer, bar)
                for cond, fp in chunk:
                    records.write_condition(records.condition_file(self.out, exp.name, cond.name),
                                            rows[cond.name], fp)
                    result.computed.append(f"{exp.name}/{cond.name}")


def condition_state(cond, num_layers: int) -> dict:
    """A condition as the report reads it: its grafts with the concrete layers they cover."""
    body = cond.to_json()
    for graft, resolved in zip(body["grafts"], cond.grafts):
        graft["layer_indices"] = layer_indices(resolved.layers, num_layers)
    return dict(body, file=f"{slug(cond.name)}.parquet")


def run_experiments(config: RunConfig, out: str | Path, *, progress: bool = True) -> RunResult:
    """Run every experiment of `config` into `out`, resuming what is already there. The
    summary and report are the reporting layer's (see `weightgraft.pipelines.run_all`)."""
    return Runner(config, out, progress=progress).run()
