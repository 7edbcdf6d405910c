"""A run folder: where each file of a run lives, and holding the folder while a run writes it.

Layout of a run folder:
  run.json                       provenance: config, models (path, sha256), datasets (manifest),
                                 seed, versions, sessions with their time (`run_json`)
  examples/<exp>/<cond>.parquet  one row per example (N/A examples included, flagged;
                                 `example_rows`, written by `result_files`)
  state/<exp>.json               the experiment's record (`record.ExperimentRecord`: conditions,
                                 examples, result sha256; what the summary and report read)
  *.shard-I-of-N.*               a shard's own run.json, state and result files (its share of
                                 the examples), until `weightgraft merge` joins them
  summary.csv, plots/, report.md, report.html   (written by `weightgraft.reporting`)

A folder holds one config's run: `run_folder` refuses a folder no record proves a run's and
locks it; `replace_other_run` refuses (or, asked, clears) the run of another config.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from weightgraft.folder_ownership import (
    OutputExistsError,
    claim_folder,
    clear_folder,
    owned_names,
    refuse_foreign,
    release_unused,
    seal_folder,
)
from weightgraft.locking import folder_lock, lock_file
from weightgraft.recorded import seal_tree


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


def state_file(out: Path, experiment: str, shard: tuple[int, int] | None = None) -> Path:
    return out / "state" / f"{experiment}{shard_tag(shard)}.json"


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
