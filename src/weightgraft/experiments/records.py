"""What a run leaves on disk: per-example records, result files, fingerprints and provenance.

Layout of a run folder:
  run.json                       provenance: config, models (path, sha256), datasets (manifest),
                                 seed, versions, sessions with their time
  examples/<exp>/<cond>.parquet  one row per example (N/A examples included, flagged)
  state/<exp>.json               the experiment's record (`record.ExperimentRecord`: conditions,
                                 examples, result sha256; what the summary and report read)
  *.shard-I-of-N.*               a shard's own run.json, state and result files (its share of
                                 the examples), until `weightgraft merge` joins them
  summary.csv, plots/, report.md, report.html   (written by `weightgraft.reporting`)

A result file carries the fingerprint of everything that made it (condition, models, dataset,
examples, dtype), so that a resumed run recomputes exactly the files whose inputs changed. It is
written with Parquet page checksums, and its sha256 is kept in the experiment's state file: a
damaged file is reported by path and recomputed, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import platform
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from weightgraft.atomic import (
    OutputExistsError,
    claim_folder,
    clear_folder,
    owned_names,
    refuse_foreign,
    release_unused,
    seal_folder,
    write_atomic,
    write_text_atomic,
)
from weightgraft.locking import folder_lock, lock_file
from weightgraft.recorded import seal_tree
from weightgraft.runtime import sha256_file, sha256_json

SCHEMA = pa.schema(
    [
        ("experiment", pa.string()),
        ("condition", pa.string()),
        ("template", pa.string()),
        ("example_id", pa.string()),
        ("fact_id", pa.string()),
        ("fact_kind", pa.string()),
        ("reversed", pa.bool_()),
        ("applicable", pa.bool_()),
        ("note", pa.string()),
        ("target", pa.string()),
        ("n_target_tokens", pa.int32()),
        ("rank", pa.int64()),
        ("prob", pa.float64()),
        ("target_logprob", pa.float64()),
        ("exact_match", pa.bool_()),
        ("predicted", pa.string()),
    ]
)
FINGERPRINT_KEY = b"weightgraft_fingerprint"


@dataclass
class Example:
    """One evaluation prompt, encoded: token ids, target ids and each role's token positions.
    `scored` indexes the target token that rank, prob and the prediction score: the first that is
    not whitespace alone (`data.encode`), 0 for ordinary targets; `unit` how many target tokens
    from there on rank and prob score (the tokens of a first character split over byte tokens),
    1 for ordinary targets; `note` says so when either differs."""

    prompt: object  # EvalPrompt
    input_ids: list[int]
    target_ids: list[int]
    positions: dict[str, list[int]]
    scored: int = 0
    note: str = ""
    unit: int = 1


def slug(name: str) -> str:
    """A file name for a condition: readable, and unique through a short hash of the name."""
    readable = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name).strip("_")[:60] or "condition"
    return f"{readable}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def results_folder(out: Path, experiment: str) -> Path:
    return out / "examples" / experiment


def shard_tag(shard: tuple[int, int] | None) -> str:
    """The infix of a shard's files (`.shard-0-of-2`); empty for a whole run."""
    return "" if shard is None else f".shard-{shard[0]}-of-{shard[1]}"


def condition_file(out: Path, experiment: str, condition: str, shard: tuple[int, int] | None = None) -> Path:
    return results_folder(out, experiment) / f"{slug(condition)}{shard_tag(shard)}.parquet"


def condition_fingerprint(
    condition_json: dict,
    dtype: str,
    model_fingerprints: dict[str, str],
    examples: list[Example],
    computation: dict | None = None,
) -> str:
    """What a condition's result depends on: its grafts, the models it reads, dtype, the
    examples (their tokens and every field of the prompt a record copies: id, fact, kind,
    template, direction, target text), and `computation`: what else changes the floating-point
    result (the device type, the example batches and the conditions per chunk)."""
    return sha256_json(
        {
            "condition": condition_json,
            "dtype": dtype,
            "models": model_fingerprints,
            "examples": [example_key(e) for e in examples],
            "computation": computation or {},
        }
    )


def example_key(e: Example) -> tuple:
    """What of an example a condition's results depend on; the scored token only where it is not
    the target's first, its unit only where it holds several tokens (so that fingerprints of
    ordinary targets are those of earlier versions)."""
    key = (e.prompt.id, e.input_ids, e.target_ids, e.positions, prompt_fields(e.prompt))
    if e.unit != 1:
        return (*key, {"scored": e.scored, "unit": e.unit, "note": e.note})
    return key if e.scored == 0 else (*key, {"scored": e.scored, "note": e.note})


def prompt_fields(prompt) -> dict:
    """The fields of a prompt that a record copies (see `base_record`)."""
    return {
        "template": prompt.template_id,
        "fact_id": prompt.fact_id,
        "fact_kind": fact_kind_of(prompt),
        "reversed": bool(prompt.reversed),
        "target": prompt.target,
    }


# ---- per-example records ---------------------------------------------------------------------
def fact_kind_of(prompt) -> str:
    """The fact's kind (fake_fake, fake_real, real_shuffled, ...), or `unknown` for datasets
    written before prompts carried it."""
    return str(getattr(prompt, "fact_kind", None) or "unknown")


def base_record(experiment: str, condition: str, ex: Example) -> dict:
    p = ex.prompt
    return {
        "experiment": experiment,
        "condition": condition,
        "template": p.template_id,
        "example_id": p.id,
        "fact_id": p.fact_id,
        "fact_kind": fact_kind_of(p),
        "reversed": bool(p.reversed),
        "target": p.target,
        "n_target_tokens": len(ex.target_ids),
    }


def na_record(experiment: str, condition: str, ex: Example, note: str) -> dict:
    return dict(
        base_record(experiment, condition, ex),
        applicable=False,
        note=f"not applicable: {note}",
        rank=None,
        prob=None,
        target_logprob=None,
        exact_match=None,
        predicted=None,
    )


def scored_record(experiment: str, condition: str, ex: Example, score: dict, predicted: str) -> dict:
    return dict(
        base_record(experiment, condition, ex),
        applicable=True,
        note=ex.note,
        rank=score["rank"],
        prob=score["prob"],
        target_logprob=score["target_logprob"],
        exact_match=score["exact_match"],
        predicted=predicted,
    )


# ---- result files ----------------------------------------------------------------------------
def write_condition(path: Path, rows: list[dict], fingerprint: str) -> str:
    """Write a result file (with page checksums); returns its sha256 for the state file."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    table = table.replace_schema_metadata({FINGERPRINT_KEY: fingerprint})
    write_atomic(path, lambda tmp: pq.write_table(table, tmp, write_page_checksum=True))
    return sha256_file(path)


def reuse_problem(
    path: Path, fingerprint: str, example_ids: list[str], sha256: str | None = None
) -> tuple[str, str] | None:
    """Why the result file at `path` cannot be reused, as (kind, reason), kind being `missing`,
    `stale` (made from other inputs) or `damaged`; None when it can. The whole file is read
    with page checksums verified, and compared with `sha256` when the state file recorded one."""
    if not path.is_file():
        return ("missing", "")
    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except Exception as err:  # any decoding failure means the bytes are not what was written
        reason = (str(err).splitlines() or [type(err).__name__])[0].replace(f" '{path}'", "")
        return ("damaged", f"unreadable: {reason}")
    stored = (table.schema.metadata or {}).get(FINGERPRINT_KEY)
    if stored is None:
        return ("damaged", "no weightgraft fingerprint in its metadata")
    if stored.decode(errors="replace") != fingerprint:
        return ("stale", "made from other inputs")
    if sha256 is not None and sha256_file(path) != sha256:
        return ("damaged", "its sha256 differs from the one recorded when it was written")
    if not table.schema.remove_metadata().equals(SCHEMA):
        return ("damaged", "its columns are not the result schema")
    if table.column("example_id").to_pylist() != list(example_ids):
        return ("damaged", "its rows are not the experiment's examples")
    return None


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


def state_file(out: Path, experiment: str, shard: tuple[int, int] | None = None) -> Path:
    return out / "state" / f"{experiment}{shard_tag(shard)}.json"


# ---- provenance ------------------------------------------------------------------------------
def versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in (
        "weightgraft",
        "torch",
        "transformers",
        "tokenizers",
        "numpy",
        "pyarrow",
        "polars",
        "matplotlib",
        "pydantic",
    ):
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
        "datasets": {
            k: {"path": config.datasets[k], "manifest": dataset_manifest(config.datasets[k])} for k in sorted(datasets)
        },
        "seed": config.seed,
        "device": config.device,
        "dtype": config.dtype,
        "versions": versions(),
    }


def run_json_file(out: Path, shard: tuple[int, int] | None = None) -> Path:
    return out / f"run{shard_tag(shard)}.json"


RUN_MARKS = ("run.json", "run.shard-*-of-*.json")
# Every entry a run writes at the top of its folder (patterns): its record lists those present.
RUN_ENTRIES = (
    *RUN_MARKS,
    "examples",
    "state",
    "plots",
    "localize",
    "summary.csv",
    "recovery.csv",
    "comparisons.csv",
    "report.md",
    "report.html",
)


def run_entries(out: Path) -> list[str]:
    """The names of the entries a run writes that `out` holds now."""
    return sorted({p.name for pattern in RUN_ENTRIES for p in out.glob(pattern)})


@contextmanager
def run_folder(out: Path, shard: tuple[int, int] | None = None) -> Iterator[Path]:
    """Hold `out` as a run folder: refuse one that no record proves a weightgraft run (its files
    would be overwritten), lock it (its shard only, when `shard` is given: the shards of one run
    are written side by side) against a second process, and record what the run wrote there."""
    out = Path(out)
    refuse_foreign(out, "run", RUN_MARKS)
    made = not out.exists()
    try:
        with folder_lock(lock_file(out, shard_tag(shard)), out):
            claim_folder(out, "run")
            try:
                yield out
            finally:
                seal_folder(out, "run", run_entries(out))
                seal_tree(out, run_entries(out))
    finally:
        release_unused(out, made)  # stopped before writing anything (e.g. a check failed): no trace


def stored_experiments(out: Path) -> list[list]:
    """The experiments of each config that the run files (run.json, shards) of `out` record."""
    found = []
    for path in sorted({p for pattern in RUN_MARKS for p in out.glob(pattern)}):
        try:
            found.append(json.loads(path.read_text())["config"]["experiments"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # unreadable: the runner rewrites it
    return found


def _experiment_names(experiments: list) -> list[str]:
    """The names a config's experiments go by (a preset or localize item without a name: its
    preset's or its own), sorted: what a run folder's files are named after."""
    names = []
    for item in experiments:
        named = item.get("name") or item.get("preset") or item.get("localize") if isinstance(item, dict) else None
        names.append(str(named) if named else json.dumps(item, sort_keys=True))
    return sorted(names)


def replace_other_run(out: Path, config, overwrite: bool) -> None:
    """A run folder holds one config's run. Another config (other experiments, whose files the
    new run would leave orphaned beside its report) is refused, or, with `overwrite`, the old
    run's files are deleted first. Changes that keep the experiments (models, batching, device,
    an edited condition, which the runner recomputes alone) resume as before."""
    current = _experiment_names(config.model_dump(mode="json")["experiments"])
    if all(_experiment_names(stored) == current for stored in stored_experiments(out)):
        return
    if not overwrite:
        raise OutputExistsError(
            f"{out} holds a run of another config (its run.json lists other experiments than "
            f"{config.name!r}'s); pass --overwrite to replace that run (its files are deleted), or choose "
            "another --out"
        )
    clear_folder(out, "run", owned_names(out) | set(run_entries(out)))


def previous_sessions(out: Path, shard: tuple[int, int] | None = None) -> list:
    """Sessions recorded in run.json; one still `running` was killed, so it reads `interrupted`."""
    path = run_json_file(out, shard)
    if path.is_file():
        try:
            sessions = json.loads(path.read_text()).get("sessions", [])
        except (json.JSONDecodeError, AttributeError):
            return []
        for session in sessions:
            if isinstance(session, dict) and session.get("status") == "running":
                session["status"] = "interrupted"
        return sessions
    return []


def write_run_json(out: Path, body: dict, shard: tuple[int, int] | None = None) -> None:
    write_text_atomic(run_json_file(out, shard), json.dumps(body, indent=2))


def mark_unfinished(out: Path, step: str, error: BaseException) -> None:
    """A step after the experiments (a `localize:` item) failed: run.json must not say
    "complete" while the run has no report. Its status reads `interrupted` (the next call
    resumes: the experiments are reused, the failed step runs again) and names the step and its
    error; the runner's own session keeps the status it ended with."""
    path = run_json_file(out)
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # no record to correct: the runner writes a fresh one next time
    reason = f"{step}: {str(error).splitlines()[0] if str(error) else type(error).__name__}"
    body.update(status="interrupted", unfinished=reason)  # the runner's session stays as it ended
    write_run_json(out, body)
