"""Shards of a run: which shard a process is, and merging the shards' files into a whole run.

A shard (I of N) writes `run.shard-I-of-N.json`, `state/<exp>.shard-I-of-N.json` and
`examples/<exp>/<cond>.shard-I-of-N.parquet` holding its share of the examples. Merging checks
that every shard is there and complete, and writes the files a single-process run would have
written (rows in the experiment's example order, with the whole run's fingerprint), so that
the summary, the report and a later resumed run read a merged run like any other.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from weightgraft.errors import UserError
from weightgraft.experiments import result_files, run_folder, run_json
from weightgraft.experiments.example_rows import ExampleRow
from weightgraft.experiments.record import ExperimentRecord
from weightgraft.runtime import launch_shard

SHARD_RUN_JSON = re.compile(r"run\.shard-(\d+)-of-(\d+)\.json")


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` (0 <= I < N) as (I, N); anything else is an error that shows the form."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not match or not int(match[1]) < int(match[2]):
        raise UserError(
            f"--shard {text!r}: write it as I/N with 0 <= I < N, e.g. --shard 0/4 for the first of four shards"
        )
    return int(match[1]), int(match[2])


def shard_from_env() -> tuple[int, int] | None:
    """(rank, world size) when launched by torchrun or accelerate with more than one process."""
    return launch_shard()


def shard_count(out: Path) -> int:
    """N of the shards found in `out`; an error when there are none or they disagree on N."""
    counts = {int(m[2]) for p in Path(out).glob("run.shard-*.json") if (m := SHARD_RUN_JSON.fullmatch(p.name))}
    if not counts:
        raise UserError(
            f"{out} holds no shards (run.shard-I-of-N.json); run "
            "`weightgraft run CONFIG --shard I/N --out RUN_DIR` for each shard first"
        )
    if len(counts) > 1:
        raise UserError(
            f"{out} holds shards of different splits ({sorted(counts)} shards); "
            "remove the files of the split you do not want (*.shard-I-of-N.*)"
        )
    return counts.pop()


def merge_shards(out: str | Path) -> dict:
    """Join the complete shards of `out` into a whole run's files; returns the run's config (as
    run.json holds it). Missing or unfinished shards are an error that names them."""
    out = Path(out)
    n = shard_count(out)
    shards = [(i, n) for i in range(n)]
    bodies, missing = [], []
    for shard in shards:
        path = run_folder.run_json_file(out, shard)
        body = json.loads(path.read_text()) if path.is_file() else None
        if body is None or body.get("status") != "complete":
            missing.append(f"{shard[0]}/{n} ({'missing' if body is None else body.get('status')})")
        bodies.append(body)
    if missing:
        raise UserError(
            f"cannot merge {out}: shard {', '.join(missing)} is not complete; run "
            "`weightgraft run CONFIG --shard I/N --out RUN_DIR` for it, then merge"
        )
    configs = {json.dumps(dict(b["config"], device=None), sort_keys=True) for b in bodies}
    if len(configs) > 1:
        raise UserError(
            f"cannot merge {out}: its shards were run from different configs; run them again from one config"
        )
    from weightgraft.experiments.config import parse_config

    config = parse_config(bodies[0]["config"])
    for exp in config.expanded():
        merge_experiment(out, exp.name, shards)
    whole = {k: v for k, v in bodies[0].items() if k not in ("shard", "sessions")}
    whole["shards"] = n
    whole["sessions"] = [dict(s, shard=f"{i}/{n}") for i, b in enumerate(bodies) for s in b.get("sessions", [])]
    run_json.write_run_json(out, dict(whole, status="complete"))
    return bodies[0]["config"]


def merge_experiment(out: Path, name: str, shards: list[tuple[int, int]]) -> None:
    """One experiment's shard files -> its whole-run result files and record."""
    parts = [shard_record(out, name, shard) for shard in shards]
    merged = parts[0].merged
    if merged is None or any(part.merged != merged for part in parts):
        raise UserError(
            f"cannot merge {out}: the shards of experiment {name!r} saw different "
            "examples or models; run every shard again from one config"
        )
    order = merged.examples
    scored = {k: v for part in parts for k, v in part.scored_after_whitespace.items()}
    units = {k: v for part in parts for k, v in part.scored_units.items()}
    whole = replace(
        parts[0],
        examples=order,
        templates=tuple(sorted({t for part in parts for t in part.templates})),
        scored_after_whitespace={pid: scored[pid] for pid in order if pid in scored},
        scored_units={pid: units[pid] for pid in order if pid in units},
        shard=None,
        merged=None,
    )
    written = {}
    for cond in whole.conditions:
        rows = merged_rows(out, name, cond.name, list(zip(shards, parts)), order)
        path = run_folder.condition_file(out, name, cond.name)
        written[path.name] = result_files.write_condition(path, rows, merged.fingerprints[cond.name])
    whole.with_results(written).write(out)


def shard_record(out: Path, name: str, shard: tuple[int, int]) -> ExperimentRecord:
    """A shard's record of experiment `name`; a missing or unreadable one is an error naming it."""
    try:
        return ExperimentRecord.read(out, name, shard)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise UserError(
            f"cannot merge {out}: {run_folder.state_file(out, name, shard)} is "
            f"missing or unreadable ({err}); run shard {shard[0]}/{shard[1]} "
            "again"
        ) from err


def merged_rows(
    out: Path, name: str, condition: str, parts: list[tuple[tuple[int, int], ExperimentRecord]], order: tuple[str, ...]
) -> list[ExampleRow]:
    """A condition's rows from every shard's result file (each checked against its shard's
    record), in the experiment's example order."""
    tables = []
    for shard, record in parts:
        path = run_folder.condition_file(out, name, condition, shard)
        problem = result_files.reuse_problem(
            path,
            result_files.stored_fingerprint(path) or "",
            list(record.examples),
            record.result_sha256.get(path.name),
        )
        if problem is not None:
            raise UserError(
                f"cannot merge {out}: {path} is {problem[0]} {problem[1]}; run "
                f"shard {shard[0]}/{shard[1]} again (it recomputes that file)"
            )
        tables.append(pq.read_table(path).replace_schema_metadata(None))
    table = pa.concat_tables(tables)
    position = {example: i for i, example in enumerate(table.column("example_id").to_pylist())}
    if sorted(position) != sorted(order) or len(position) != table.num_rows:
        raise UserError(
            f"cannot merge {out}: the shards of {name}/{condition} do not "
            "cover the experiment's examples once each; run the shards again"
        )
    return [ExampleRow(**row) for row in table.take([position[example] for example in order]).to_pylist()]
