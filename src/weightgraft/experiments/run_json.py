"""run.json: a run's provenance (config, models, datasets, seed, versions) and its sessions,
including the status a step that failed after the experiments leaves there."""

from __future__ import annotations

import json
import platform
from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.experiments.run_folder import run_json_file


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
