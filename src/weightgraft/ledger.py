"""The provenance of a multi-step job, and its resume rule: one JSON file, one record per step.

weightgraft's one resume mechanism for the steps of a pipeline (the built-in models' build,
`weightgraft reproduce` and a run's `localize` experiments; a finetune's checkpoints, resumed
while it runs, carry a stamp compared by the same rule: `stamp_matches`). A step is done when its record exists, the sha256 of its inputs (data
manifests, model fingerprints, the step's own config) equals the one recorded, and every output
it recorded still exists with the sha256 it was written with (hashed on every reuse, once per
process: a kept size and mtime prove nothing; a damaged output makes the step run again). A done step is never redone; a step whose inputs changed is redone.
The file is replaced atomically after each step, so a job killed between steps resumes at the
first step not recorded, and a step killed halfway leaves no record (its outputs are written
atomically by the step itself). Only the main process (rank 0) writes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.runtime import file_facts, file_unchanged, sha256_json

# What a step's `build` returns: (outputs to record, paths that must exist for the step to be done).
Built = tuple[dict, list[Path]]
# Told what the ledger does with a step: (event, step name, record); events are "reused" (record
# is the earlier one), "start" (record is None) and "finished" (record is the new one).
Announce = Callable[[str, str, dict | None], None]


def same_inputs(recorded_sha256: str | None, inputs: dict) -> bool:
    """The resume rule's first half, the one comparison of inputs: work recorded with the sha256
    of `inputs` (a ledger's step, a stamp) was made from them; None (nothing recorded) never was."""
    return recorded_sha256 is not None and recorded_sha256 == sha256_json(inputs)


def stamp_matches(stamp: Path, inputs: dict) -> bool:
    """Work kept beside a ledger rather than in it (a finetune's checkpoints while it runs, which
    change as it goes and so have no outputs to check) is of `inputs` when its stamp file holds
    their sha256 (`write_stamp`)."""
    return stamp.is_file() and same_inputs(stamp.read_text(), inputs)


def write_stamp(stamp: Path, inputs: dict) -> None:
    """Stamp the work in `stamp`'s folder as made from `inputs` (read by `stamp_matches`)."""
    write_text_atomic(stamp, sha256_json(inputs))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """`provenance.json` of a job folder: header, steps, and one entry per invocation.

    `base`: store the recorded paths relative to this folder (so that the folder can move, as
    the built-in cache may); None stores them as given."""

    def __init__(self, path: Path, header: dict, write: bool = True, base: Path | None = None):
        self.path = Path(path)
        self.write_enabled = write
        self.base = Path(base) if base is not None else None
        self.body = json.loads(self.path.read_text()) if self.path.is_file() else {}
        self.body.update(header)
        self.body.setdefault("steps", {})
        self.body.setdefault("sessions", [])
        self.session = {"started": _now(), "computed": [], "reused": []}
        self.body["sessions"].append(self.session)

    def reload_steps(self) -> None:
        """Read the steps again from disk (other ranks follow what rank 0 records)."""
        if self.path.is_file():
            self.body["steps"] = json.loads(self.path.read_text()).get("steps", {})

    def record_of(self, name: str) -> dict | None:
        return self.body["steps"].get(name)

    def _stored(self, path: Path) -> str:
        if self.base is None:
            return str(path)
        return os.path.relpath(os.path.abspath(path), os.path.abspath(self.base))

    def _facts(self, path: Path) -> dict[str, dict]:
        """{stored path: size, mtime, sha256} of an output file, or of every file in an output folder."""
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        return {self._stored(f): file_facts(f) for f in files}

    def _resolved(self, stored: str) -> Path:
        if self.base is None:
            return Path(stored)
        here = self.base / stored  # an absolute stored path stays itself
        # A record written before its paths were kept relative to `base` holds them as given
        # (relative to the working directory of the time): found there, they still count.
        return here if here.exists() or not Path(stored).exists() else Path(stored)

    def is_done(self, name: str, inputs: dict) -> bool:
        record = self.record_of(name)
        if record is None or not same_inputs(record.get("inputs_sha256"), inputs):
            return False
        if not all(self._resolved(p).exists() for p in record.get("paths", [])):
            return False
        return not self.changed_outputs(name)

    def changed_outputs(self, name: str) -> list[Path]:
        """The recorded outputs of step `name` that are gone or no longer the bytes (sha256)
        recorded when the step wrote them: a step with any is done again."""
        record = self.record_of(name) or {}
        hashes = record.get("hashes", {})  # absent in records written before hashes were kept
        return [self._resolved(key) for key, facts in hashes.items() if not file_unchanged(self._resolved(key), facts)]

    def reuse(self, name: str) -> dict:
        self.session["reused"].append(name)
        return self.record_of(name)

    def finish(self, name: str, inputs: dict, outputs: dict, paths: list[Path], started: float | None) -> dict:
        """Record `name` as done; `started` None: found done without a record (adopted), no time."""
        record = {
            "inputs": inputs,
            "inputs_sha256": sha256_json(inputs),
            "outputs": outputs,
            "paths": [self._stored(p) for p in paths],
            "hashes": {key: facts for p in paths for key, facts in self._facts(Path(p)).items()},
            "seconds": round(time.time() - started, 1) if started is not None else None,
            "finished": _now(),
        }
        self.body["steps"][name] = record
        self.session["computed" if started is not None else "reused"].append(name)
        self.save()
        return record

    def run(self, name: str, inputs: dict, build: Callable[[], Built], announce: Announce | None = None) -> dict:
        """The record of step `name`: reused if done with these `inputs`, else `build()` runs
        and its (outputs, paths) are recorded."""
        tell = announce or (lambda event, step, record: None)
        if self.is_done(name, inputs):
            record = self.reuse(name)
            tell("reused", name, record)
            return record
        tell("start", name, None)
        started = time.time()
        outputs, paths = build()
        record = self.finish(name, inputs, outputs, paths, started)
        tell("finished", name, record)
        return record

    def save(self) -> None:
        if self.write_enabled:
            self.session["saved"] = _now()
            write_text_atomic(self.path, json.dumps(self.body, indent=2, default=str))
