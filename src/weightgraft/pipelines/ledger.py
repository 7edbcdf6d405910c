"""The provenance of a multi-step job, and its resume rule: one JSON file, one record per step.

A step is done when its record exists, the sha256 of its inputs (data manifests, model
fingerprints, the step's own config) equals the one recorded, and every output it recorded still
exists. A done step is never redone; a step whose inputs changed is redone. Only the main
process (rank 0) writes; the file is replaced atomically after each step.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.runtime import sha256_file as sha256_of_file  # noqa: F401 - named so by reproduce
from weightgraft.runtime import sha256_json as sha256_of


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Ledger:
    """`provenance.json` of a job folder: header, steps, and one entry per invocation."""

    def __init__(self, path: Path, header: dict, write: bool = True):
        self.path = Path(path)
        self.write_enabled = write
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

    def is_done(self, name: str, inputs: dict) -> bool:
        record = self.record_of(name)
        if record is None or record.get("inputs_sha256") != sha256_of(inputs):
            return False
        return all(Path(p).exists() for p in record.get("paths", []))

    def reuse(self, name: str) -> dict:
        self.session["reused"].append(name)
        return self.record_of(name)

    def finish(self, name: str, inputs: dict, outputs: dict, paths: list[Path], started: float) -> dict:
        record = {
            "inputs": inputs,
            "inputs_sha256": sha256_of(inputs),
            "outputs": outputs,
            "paths": [str(p) for p in paths],
            "seconds": round(time.time() - started, 1),
            "finished": _now(),
        }
        self.body["steps"][name] = record
        self.session["computed"].append(name)
        self.save()
        return record

    def save(self) -> None:
        if self.write_enabled:
            self.session["saved"] = _now()
            write_text_atomic(self.path, json.dumps(self.body, indent=2, default=str))
