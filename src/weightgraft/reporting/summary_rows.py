"""The rows of a run's summary files (summary.csv, recovery.csv, comparisons.csv): one frozen
dataclass each, whose fields in order are the file's columns, written and read by one routine for
all three (`write_rows`, `read_rows`) through the project's codec.

In memory a value that is not defined (not applicable, undefined recovery) is None, as it reads
back from the files; values keep their full precision, and the files round them to 6 decimals.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from types import NoneType
from typing import TypeVar, get_args, get_type_hints

from weightgraft.atomic import write_text_atomic
from weightgraft.codec import load

Row = TypeVar("Row")


@dataclass(frozen=True)
class SummaryRow:
    """A row of summary.csv: one experiment x condition x group x metric, with its 95% interval."""

    experiment: str
    condition: str
    template: str
    fact_kind: str
    metric: str
    value: float | None  # None: not applicable (n = 0)
    ci_low: float | None
    ci_high: float | None
    n: int
    n_facts: int | None
    fidelity: str  # the definition the row was computed in: authors, clean, `authors = clean`, or ""
    wording: str  # the paper sentences' wording: clean or authors


@dataclass(frozen=True)
class RecoveryRow:
    """A row of recovery.csv: (condition - base) / (full - base), with the gap full - base."""

    experiment: str
    condition: str
    template: str
    fact_kind: str
    metric: str
    base: str
    full: str
    recovery: float | None  # None: undefined (the gap's interval includes 0, or a value is missing)
    ci_low: float | None
    ci_high: float | None
    gap: float | None
    gap_low: float | None
    gap_high: float | None
    defined: bool
    n: int
    n_facts: int


@dataclass(frozen=True)
class ComparisonRow:
    """A row of comparisons.csv: a paired test of condition a against b over facts."""

    experiment: str
    a: str
    b: str
    template: str
    metric: str
    difference: float | None
    ci_low: float | None
    ci_high: float | None
    effect_size: float | None
    p_value: float | None
    permutations: int
    exact: bool
    n: int
    n_facts: int


def defined(value: float) -> float | None:
    """A computed number as a row holds it: None where it is not defined (NaN)."""
    return None if math.isnan(value) else value


def _cell(value: object) -> object:
    """A cell as the file holds it: floats to 6 decimals, None (undefined) empty."""
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.6f}"
    return "" if value is None else value


def write_rows(path: Path, row_type: type, rows: list) -> Path:
    """`rows` (instances of `row_type`) as a CSV file whose header is the type's fields."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([f.name for f in fields(row_type)])
    for row in rows:
        writer.writerow([_cell(v) for v in astuple(row)])
    return write_text_atomic(path, buffer.getvalue())


def read_rows(path: Path, row_type: type[Row], defaults: dict[str, str] | None = None) -> list[Row]:
    """The rows of a file written by `write_rows` with `row_type` (an empty cell reads as None); a
    column missing from an older file takes its value from `defaults` (None when it has none)."""
    optional = {name for name, hint in get_type_hints(row_type).items() if NoneType in get_args(hint)}
    with path.open(newline="") as handle:
        return [
            load(row_type, {f.name: _value(raw, f.name, f.name in optional, defaults or {}) for f in fields(row_type)})
            for raw in csv.DictReader(handle)
        ]


def _value(raw: dict[str, str], name: str, optional: bool, defaults: dict[str, str]) -> str | None:
    """A cell's text for the codec: an empty cell of a column that admits None is None."""
    if name not in raw:
        return defaults.get(name)
    return None if optional and raw[name] == "" else raw[name]
