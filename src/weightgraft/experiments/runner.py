"""The experiment runner: conditions x examples, batched, resumable, written atomically.

Layout of a run folder:
  run.json                    provenance: config, models (path, sha256), datasets (manifest),
                              seed, versions, sessions with their time
  examples/<exp>/<cond>.parquet  one row per example (N/A examples included, flagged)
  state/<exp>.json            the experiment's conditions and examples (for the report)
  summary.csv, plots/, report.md, report.html

Resuming: a condition whose Parquet file exists and carries the same fingerprint (condition,
models, dataset, examples, dtype) is not recomputed. Conditions that share recipient, donor and
method are computed together in chunks; rows of one forward pass are (example, condition) pairs,
so a batch holds every pending condition of the chunk for a handful of examples.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from weightgraft.data.batching import right_pad
from weightgraft.experiments.conditions import Condition
from weightgraft.experiments.components import resolve_for_model
from weightgraft.experiments.config import ExperimentSpec, RunConfig
from weightgraft.experiments.metrics import score_rows
from weightgraft.experiments.models import (fingerprint_model, load_model, load_tokenizer,
                                            model_dir, vocab_fingerprint)
from weightgraft.experiments.patching import patched_logits
from weightgraft.experiments.plan import experiment_conditions, layer_indices, select_examples
from weightgraft.experiments.roles import NotApplicable
from weightgraft.atomic import write_atomic, write_text_atomic

SCHEMA = pa.schema([
    ("experiment", pa.string()), ("condition", pa.string()), ("template", pa.string()),
    ("example_id", pa.string()), ("fact_id", pa.string()), ("reversed", pa.bool_()),
    ("applicable", pa.bool_()), ("note", pa.string()), ("target", pa.string()),
    ("n_target_tokens", pa.int32()), ("rank", pa.int64()), ("prob", pa.float64()),
    ("target_logprob", pa.float64()), ("exact_match", pa.bool_()), ("predicted", pa.string()),
])


@dataclass
class Example:
    prompt: object  # EvalPrompt
    input_ids: list[int]
    target_ids: list[int]
    positions: dict[str, list[int]]


@dataclass
class RunResult:
    out: Path
    computed: list[str] = field(default_factory=list)  # "experiment/condition" done this session
    reused: list[str] = field(default_factory=list)
    seconds: float = 0.0


def slug(name: str) -> str:
    """A file name for a condition: readable, and unique through a short hash of the name."""
    readable = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("_")[:60] or "condition"
    return f"{readable}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _default_encode():
    from weightgraft.data.encode import encode_prompt

    return encode_prompt


def _default_load_prompts():
    from weightgraft.data.io import load_eval_prompts

    return load_eval_prompts


def _default_grafter():
    from weightgraft import Graft, Grafter

    return Grafter, Graft


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("weightgraft", "torch", "transformers", "tokenizers", "numpy", "pyarrow",
                 "polars", "matplotlib", "pydantic"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


class Runner:
    """Runs a validated RunConfig into a folder. The `encode`, `load_prompts` and `grafter`
    hooks default to weightgraft's own data layer and engine."""

    def __init__(self, config: RunConfig, out: str | Path, *, progress: bool = True,
                 encode: Callable | None = None, load_prompts: Callable | None = None,
                 grafter: tuple | None = None, after_condition: Callable[[str], None] | None = None):
        self.config = config
        self.out = Path(out)
        self.progress = progress
        self._encode = encode
        self._load_prompts = load_prompts
        self._grafter = grafter
        self.after_condition = after_condition  # called after each condition's file is written
        if not progress:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        self._models: dict[str, torch.nn.Module] = {}
        self._fingerprints: dict[str, str] = {}
        self._grafters: dict[tuple[str, str], object] = {}
        self._tokenizer = None
        self._prompts: dict[str, list] = {}
        self.available: dict[str, int] = {}  # evaluation prompts an experiment could score

    # ---- resources -------------------------------------------------------------------------
    def model(self, key: str):
        if key not in self._models:
            self._models[key] = load_model(self.config.models[key], self.config.device,
                                           self.config.dtype, self.config.trust_remote_code)
        return self._models[key]

    def fingerprint(self, key: str) -> str:
        if key not in self._fingerprints:
            self._fingerprints[key] = fingerprint_model(self.config.models[key])
        return self._fingerprints[key]

    def tokenizer(self, keys: list[str]):
        """One tokenizer for the run; every model must share its vocabulary."""
        if self._tokenizer is None:
            seen = {}
            for key in keys:
                path = self.config.models[key]
                if path in seen:
                    continue
                seen[path] = load_tokenizer(path, self.config.trust_remote_code)
            first_path, first = next(iter(seen.items()))
            reference = vocab_fingerprint(first)
            for path, tok in seen.items():
                if vocab_fingerprint(tok) != reference:
                    raise ValueError(f"models {first_path!r} and {path!r} have different "
                                     "tokenizers; grafting needs one shared vocabulary")
            self._tokenizer = first
        return self._tokenizer

    def grafter(self, recipient: str, donor: str):
        key = (recipient, donor)
        if key not in self._grafters:
            grafter_cls, _ = self._grafter or _default_grafter()
            grafter = grafter_cls(self.model(recipient), self.model(donor))
            # Each row in one pass, whatever else is in its batch: prefix sharing would cut a
            # row's computation where other rows' grafts differ, and a resumed run (with fewer
            # conditions per batch) would then differ from an uninterrupted one in the last bits.
            grafter.share_prefixes = False
            self._grafters[key] = grafter
        return self._grafters[key]

    def prompts(self, dataset: str) -> list:
        if dataset not in self._prompts:
            loader = self._load_prompts or _default_load_prompts()
            self._prompts[dataset] = list(loader(self.config.datasets[dataset]))
        return self._prompts[dataset]

    # ---- provenance --------------------------------------------------------------------------
    def dataset_manifest(self, key: str) -> dict:
        path = Path(self.config.datasets[key]) / "manifest.json"
        if path.is_file():
            return json.loads(path.read_text())
        return {"note": f"no manifest.json in {self.config.datasets[key]}"}

    def provenance(self, keys: set[str], datasets: set[str]) -> dict:
        return {
            "config": self.config.model_dump(mode="json"),
            "models": {k: {"path": self.config.models[k],
                           "resolved": str(model_dir(self.config.models[k]) or ""),
                           "sha256": self.fingerprint(k)} for k in sorted(keys)},
            "datasets": {k: {"path": self.config.datasets[k], "manifest": self.dataset_manifest(k)}
                         for k in sorted(datasets)},
            "seed": self.config.seed, "device": self.config.device, "dtype": self.config.dtype,
            "versions": _versions(),
        }

    # ---- main loop -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        start = time.perf_counter()
        started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.out.mkdir(parents=True, exist_ok=True)
        experiments = self.config.expanded()
        keys = {k for e in experiments for k in (e.recipient, e.donor)}
        for exp in experiments:
            for item in exp.conditions:
                if not isinstance(item, str):
                    keys |= {k for k in (item.recipient, item.donor) if k}
        datasets = {e.dataset for e in experiments}
        tokenizer = self.tokenizer(sorted(keys))
        provenance = self.provenance(keys, datasets)
        result = RunResult(out=self.out)
        sessions = self._previous_sessions()
        for exp in experiments:
            self.run_experiment(exp, tokenizer, result)
        result.seconds = time.perf_counter() - start
        sessions.append({"started": started_at, "seconds": round(result.seconds, 2),
                         "computed": len(result.computed), "reused": len(result.reused)})
        provenance["sessions"] = sessions
        write_text_atomic(self.out / "run.json", json.dumps(provenance, indent=2))
        from weightgraft.reporting.summary import write_summary

        write_summary(self.out, experiments, self.config.bootstrap, self.config.seed)
        return result

    def _previous_sessions(self) -> list:
        path = self.out / "run.json"
        if path.is_file():
            try:
                return json.loads(path.read_text()).get("sessions", [])
            except json.JSONDecodeError:
                return []
        return []

    def encode_examples(self, exp: ExperimentSpec, tokenizer) -> list[Example]:
        available = self.prompts(exp.dataset)
        if exp.templates is not None:
            available = [p for p in available if p.template_id in exp.templates]
        self.available[exp.name] = len(available)
        prompts = select_examples(self.prompts(exp.dataset), exp.templates, exp.max_examples,
                                  self.config.seed, f"experiment {exp.name!r}")
        encode = self._encode or _default_encode()
        examples = []
        for prompt in prompts:
            enc = encode(tokenizer, prompt)
            if not enc.target_ids:
                raise ValueError(f"prompt {prompt.id!r}: target {prompt.target!r} has no tokens")
            positions = {str(k): list(v) for k, v in enc.positions.items()}
            examples.append(Example(prompt, list(enc.input_ids), list(enc.target_ids), positions))
        return examples

    def condition_fingerprint(self, exp: ExperimentSpec, cond: Condition,
                              examples: list[Example]) -> str:
        return _sha({
            "condition": cond.to_json(), "dtype": self.config.dtype,
            "recipient": self.fingerprint(cond.recipient), "donor": self.fingerprint(cond.donor),
            "examples": [(e.prompt.id, e.input_ids, e.target_ids, e.positions) for e in examples],
        })

    def run_experiment(self, exp: ExperimentSpec, tokenizer, result: RunResult) -> None:
        num_layers = self.model(exp.recipient).config.get_text_config().num_hidden_layers
        conditions = experiment_conditions(exp, num_layers)
        examples = self.encode_examples(exp, tokenizer)
        folder = self.out / "examples" / exp.name
        state = {
            "name": exp.name, "title": exp.title or exp.name, "description": exp.description,
            "dataset": exp.dataset, "recipient": exp.recipient, "donor": exp.donor,
            "headline": exp.headline, "plot": exp.plot, "num_layers": num_layers,
            "conditions": [dict(c.to_json(), file=f"{slug(c.name)}.parquet") for c in conditions],
            "examples": [e.prompt.id for e in examples],
            "available_examples": self.available[exp.name],
            "templates": sorted({e.prompt.template_id for e in examples}),
        }
        write_text_atomic(self.out / "state" / f"{exp.name}.json", json.dumps(state, indent=2))
        pending = []
        for cond in conditions:
            fp = self.condition_fingerprint(exp, cond, examples)
            path = folder / f"{slug(cond.name)}.parquet"
            if path.is_file() and _stored_fingerprint(path) == fp:
                result.reused.append(f"{exp.name}/{cond.name}")
            else:
                pending.append((cond, fp))
        groups: dict[tuple, list] = {}
        for cond, fp in pending:
            groups.setdefault((cond.recipient, cond.donor, cond.method), []).append((cond, fp))
        chunks = [items[i:i + self.config.conditions_per_chunk]
                  for items in groups.values()
                  for i in range(0, len(items), self.config.conditions_per_chunk)]
        total = sum(len(chunk) for chunk in chunks) * len(examples)
        with tqdm(total=total, desc=exp.name, unit="row", disable=not self.progress or total == 0,
                  leave=False) as bar:
            for chunk in chunks:
                records = self.compute_chunk(exp, [c for c, _ in chunk], examples, tokenizer, bar)
                for cond, fp in chunk:
                    path = folder / f"{slug(cond.name)}.parquet"
                    _write_parquet(path, records[cond.name], fp)
                    result.computed.append(f"{exp.name}/{cond.name}")
                    if self.after_condition:
                        self.after_condition(f"{exp.name}/{cond.name}")

    # ---- computation -------------------------------------------------------------------------
    def compute_chunk(self, exp: ExperimentSpec, chunk: list[Condition], examples: list[Example],
                      tokenizer, bar) -> dict[str, list[dict]]:
        """Per-example records for every condition of the chunk (same recipient/donor/method)."""
        recipient, donor, method = chunk[0].recipient, chunk[0].donor, chunk[0].method
        records: dict[str, list[dict]] = {c.name: [] for c in chunk}
        longest = max(len(e.input_ids) + len(e.target_ids) - 1 for e in examples)
        # Tokens per forward: the config's cap, and at most ~1 GiB of float32 logits.
        vocab = self.model(recipient).config.get_text_config().vocab_size
        budget = min(self.config.max_batch_tokens, 2**28 // vocab)
        per_batch = max(1, budget // (longest * len(chunk)))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        device = self.config.device
        if method == "weights":
            grafter = self.grafter(recipient, donor)
            _, graft_cls = self._grafter or _default_grafter()
            available = list(getattr(grafter, "components", []))
        else:
            from weightgraft.adapters import adapter_for

            rec_model, don_model = self.model(recipient), self.model(donor)
            layers_of = adapter_for(rec_model).decoder_layers
            num_layers = len(layers_of(rec_model))
        # Similar prompts side by side: lengths line up within a batch, so padding is short.
        ordered = sorted(examples, key=lambda e: (e.prompt.template_id, len(e.input_ids)))
        for start in range(0, len(ordered), per_batch):
            batch = ordered[start:start + per_batch]
            rows, masks = [], []  # rows: (example index in batch, condition)
            for ei, ex in enumerate(batch):
                total_len = len(ex.input_ids) + len(ex.target_ids) - 1
                for cond in chunk:
                    try:
                        row_masks = cond.row_masks(ex.positions, len(ex.input_ids), total_len)
                    except NotApplicable as err:
                        records[cond.name].append(_na_record(exp, cond, ex, str(err)))
                        continue
                    rows.append((ei, cond))
                    masks.append(row_masks)
            if rows:
                seqs = [batch[ei].input_ids + batch[ei].target_ids[:-1] for ei, _ in rows]
                if method == "weights":
                    row_grafts = [
                        [graft_cls(positions=m, layers=lay, components=resolve_for_model(c, available))
                         for m, lay, c in row_masks] or None
                        for row_masks in masks]
                    ids, attn = _pad(seqs, pad, device)
                    logits = grafter.logits(ids, row_grafts=row_grafts, attention_mask=attn)
                else:
                    ex_seqs = [ex.input_ids + ex.target_ids[:-1] for ex in batch]
                    ex_ids, ex_attn = _pad(ex_seqs, pad, device)
                    patch = torch.zeros(len(rows), num_layers, ex_ids.shape[1], dtype=torch.bool,
                                        device=device)
                    for r, row_masks in enumerate(masks):
                        for m, lay, _ in row_masks:
                            patch[r, layer_indices(lay, num_layers), :len(m)] |= torch.tensor(
                                m, device=device)
                    row_example = torch.tensor([ei for ei, _ in rows], device=device)
                    logits = patched_logits(rec_model, don_model, layers_of, ex_ids, ex_attn,
                                            row_example, patch)
                scores = score_rows(logits, [len(batch[ei].input_ids) for ei, _ in rows],
                                    [batch[ei].target_ids for ei, _ in rows])
                for (ei, cond), score in zip(rows, scores):
                    records[cond.name].append(_record(exp, cond, batch[ei], score, tokenizer))
            bar.update(len(batch) * len(chunk))
        for cond in chunk:  # keep dataset order whatever the batching did
            order = {e.prompt.id: i for i, e in enumerate(examples)}
            records[cond.name].sort(key=lambda r: order[r["example_id"]])
        return records


def _pad(seqs: list[list[int]], pad: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = right_pad(seqs, pad)
    return ids.to(device), mask.to(device)


def _base_record(exp: ExperimentSpec, cond: Condition, ex: Example) -> dict:
    p = ex.prompt
    return {"experiment": exp.name, "condition": cond.name, "template": p.template_id,
            "example_id": p.id, "fact_id": p.fact_id, "reversed": bool(p.reversed),
            "target": p.target, "n_target_tokens": len(ex.target_ids)}


def _na_record(exp, cond, ex, note: str) -> dict:
    return dict(_base_record(exp, cond, ex), applicable=False, note=f"not applicable: {note}",
                rank=None, prob=None, target_logprob=None, exact_match=None, predicted=None)


def _record(exp, cond, ex, score: dict, tokenizer) -> dict:
    return dict(_base_record(exp, cond, ex), applicable=True, note="", rank=score["rank"],
                prob=score["prob"], target_logprob=score["target_logprob"],
                exact_match=score["exact_match"],
                predicted=tokenizer.decode([score["predicted_id"]]))


def _write_parquet(path: Path, rows: list[dict], fingerprint: str) -> None:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    table = table.replace_schema_metadata({"weightgraft_fingerprint": fingerprint})
    write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def _stored_fingerprint(path: Path) -> str | None:
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:
        return None
    value = meta.get(b"weightgraft_fingerprint")
    return value.decode() if value else None


def run_experiments(config: RunConfig, out: str | Path, *, progress: bool = True,
                    report: bool = True, **hooks) -> RunResult:
    """Run every experiment of `config` into `out` (resuming), then write the summary and,
    unless `report=False`, the plots and the report."""
    result = Runner(config, out, progress=progress, **hooks).run()
    if report:
        from weightgraft.reporting.report import write_report

        write_report(Path(out))
    return result
