"""A condition's result file: its columns, the fingerprint of what made it, and whether a stored
one can be reused.

A result file carries the fingerprint of everything that made it (condition, models, dataset,
examples, dtype), so that a resumed run recomputes exactly the files whose inputs changed. It is
written with Parquet page checksums, and its sha256 is kept in the experiment's state file: a
damaged file is reported by path and recomputed, never trusted.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from weightgraft.atomic import write_atomic
from weightgraft.experiments.example_rows import Example, ExampleRow, example_key
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


def write_condition(path: Path, rows: list[ExampleRow], fingerprint: str) -> str:
    """Write a result file (with page checksums); returns its sha256 for the state file."""
    table = pa.Table.from_pylist([asdict(row) for row in rows], schema=SCHEMA)
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
