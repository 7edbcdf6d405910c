"""What a run leaves on disk: per-example records, result files, fingerprints and provenance.

Layout of a run folder:
  run.json                       provenance: config, models (path, sha256), datasets (manifest),
                                 seed, versions, sessions with their time
  examples/<exp>/<cond>.parquet  one row per example (N/A examples included, flagged)
  state/<exp>.json               the experiment's conditions and examples (for the report)
  summary.csv, plots/, report.md, report.html   (written by `weightgraft.reporting`)

A result file carries the fingerprint of everything that made it (condition, models, dataset,
examples, dtype), so that a resumed run recomputes exactly the files whose inputs changed.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from weightgraft.atomic import write_atomic, write_text_atomic

SCHEMA = pa.schema([
    ("experiment", pa.string()), ("condition", pa.string()), ("template", pa.string()),
    ("example_id", pa.string()), ("fact_id", pa.string()), ("fact_kind", pa.string()),
    ("reversed", pa.bool_()), ("applicable", pa.bool_()), ("note", pa.string()),
    ("target", pa.string()), ("n_target_tokens", pa.int32()), ("rank", pa.int64()),
    ("prob", pa.float64()), ("target_logprob", pa.float64()), ("exact_match", pa.bool_()),
    ("predicted", pa.string()),
])
FINGERPRINT_KEY = b"weightgraft_fingerprint"


@dataclass
class Example:
    """One evaluation prompt, encoded: token ids, target ids and each role's token positions."""

    prompt: object  # EvalPrompt
    input_ids: list[int]
    target_ids: list[int]
    positions: dict[str, list[int]]


def slug(name: str) -> str:
    """A file name for a condition: readable, and unique through a short hash of the name."""
    readable = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("_")[:60] or "condition"
    return f"{readable}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def sha_of(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def condition_file(out: Path, experiment: str, condition: str) -> Path:
    return out / "examples" / experiment / f"{slug(condition)}.parquet"


def condition_fingerprint(condition_json: dict, dtype: str, model_fingerprints: dict[str, str],
                          examples: list[Example]) -> str:
    """What a condition's result depends on: its grafts, the models it reads, dtype, examples."""
    return sha_of({
        "condition": condition_json, "dtype": dtype, "models": model_fingerprints,
        "examples": [(e.prompt.id, e.input_ids, e.target_ids, e.positions) for e in examples],
    })


# ---- per-example records ---------------------------------------------------------------------
def fact_kind_of(prompt) -> str:
    """The fact's kind (fake_fake, fake_real, real_shuffled, ...), or `unknown` for datasets
    written before prompts carried it."""
    return str(getattr(prompt, "fact_kind", None) or "unknown")


def base_record(experiment: str, condition: str, ex: Example) -> dict:
    p = ex.prompt
    return {"experiment": experiment, "condition": condition, "template": p.template_id,
            "example_id": p.id, "fact_id": p.fact_id, "fact_kind": fact_kind_of(p),
            "reversed": bool(p.reversed), "target": p.target,
            "n_target_tokens": len(ex.target_ids)}


def na_record(experiment: str, condition: str, ex: Example, note: str) -> dict:
    return dict(base_record(experiment, condition, ex), applicable=False,
                note=f"not applicable: {note}", rank=None, prob=None, target_logprob=None,
                exact_match=None, predicted=None)


def scored_record(experiment: str, condition: str, ex: Example, score: dict, predicted: str) -> dict:
    return dict(base_record(experiment, condition, ex), applicable=True, note="",
                rank=score["rank"], prob=score["prob"], target_logprob=score["target_logprob"],
                exact_match=score["exact_match"], predicted=predicted)


# ---- result files ----------------------------------------------------------------------------
def write_condition(path: Path, rows: list[dict], fingerprint: str) -> None:
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    table = table.replace_schema_metadata({FINGERPRINT_KEY: fingerprint})
    write_atomic(path, lambda tmp: pq.write_table(table, tmp))


def stored_fingerprint(path: Path) -> str | None:
    """The fingerprint a result file was written with; None when absent or unreadable."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception:
        return None
    value = meta.get(FINGERPRINT_KEY)
    return value.decode() if value else None


def read_condition(path: Path) -> dict[str, list]:
    """A result file's columns (older files without `fact_kind` read as `unknown`)."""
    table = pq.read_table(path).to_pydict()
    if "fact_kind" not in table:
        table["fact_kind"] = ["unknown"] * len(table["example_id"])
    return table


def write_state(out: Path, state: dict) -> None:
    write_text_atomic(out / "state" / f"{state['name']}.json", json.dumps(state, indent=2))


def read_state(out: Path, experiment: str) -> dict:
    return json.loads((out / "state" / f"{experiment}.json").read_text())


# ---- provenance ------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("weightgraft", "torch", "transformers", "tokenizers", "numpy", "pyarrow",
                 "polars", "matplotlib", "pydantic"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            pass
    return out


def dataset_manifest(path: str) -> dict:
    manifest = Path(path) / "manifest.json"
    if manifest.is_file():
        return json.loads(manifest.read_text())
    return {"note": f"no manifest.json in {path}"}


def provenance(config, model_info: dict[str, dict], datasets: set[str]) -> dict:
    """run.json's body, sessions excepted; `model_info` maps key -> path, resolved, sha256."""
    return {
        "config": config.model_dump(mode="json"),
        "models": {k: model_info[k] for k in sorted(model_info)},
        "datasets": {k: {"path": config.datasets[k], "manifest": dataset_manifest(config.datasets[k])}
                     for k in sorted(datasets)},
        "seed": config.seed, "device": config.device, "dtype": config.dtype,
        "versions": versions(),
    }


def previous_sessions(out: Path) -> list:
    path = out / "run.json"
    if path.is_file():
        try:
            return json.loads(path.read_text()).get("sessions", [])
        except json.JSONDecodeError:
            return []
    return []


def write_run_json(out: Path, body: dict) -> None:
    write_text_atomic(out / "run.json", json.dumps(body, indent=2))
