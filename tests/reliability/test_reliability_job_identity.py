"""A reproduce job's folder is its identity (issue 41, item 11): a finished job is found done
whatever spelling of --out names its folder (relative, absolute, from another working
directory), and after the folder is moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training_fixtures import tiny_home
from weightgraft.cli import _register_all, app


def args(model: Path, out: str | Path) -> list[str]:
    return [
        "reproduce",
        "--model",
        str(model),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--facts",
        "6",
        "--epochs",
        "1",
        "--lr",
        "3e-3",
        "--max-examples",
        "6",
        "--bootstrap",
        "10",
        "--no-progress",
    ]


def last_session(out: Path) -> dict:
    return json.loads((out / "provenance.json").read_text())["sessions"][-1]


def test_a_finished_job_is_reused_by_any_spelling_of_its_folder_and_after_a_move(tmp_path, monkeypatch):
    from weightgraft.training.builtin import ensure_builtin

    model = ensure_builtin("tiny", home=tiny_home(), progress=False, finetunes=False).pretrained
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))
    _register_all()
    first, other = tmp_path / "first", tmp_path / "other"
    first.mkdir()
    other.mkdir()
    monkeypatch.chdir(first)
    done = CliRunner().invoke(app, args(model, "job"))  # relative to the first working directory
    assert done.exit_code == 0, done.output
    job = first / "job"
    steps = set(json.loads((job / "provenance.json").read_text())["steps"])
    report = (job / "report.md").read_bytes()
    monkeypatch.chdir(other)
    for spelling in (job, Path("..") / "first" / "job", f"{job}/"):  # absolute, from elsewhere, a slash
        again = CliRunner().invoke(app, args(model, spelling))
        assert again.exit_code == 0, again.output
        assert last_session(job)["computed"] == [] and set(last_session(job)["reused"]) == steps, spelling
    moved = tmp_path / "moved" / "job"
    moved.parent.mkdir()
    shutil.move(job, moved)
    again = CliRunner().invoke(app, args(model, moved))
    assert again.exit_code == 0, again.output
    assert last_session(moved)["computed"] == [] and set(last_session(moved)["reused"]) == steps
    assert (moved / "report.md").read_bytes() == report


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
