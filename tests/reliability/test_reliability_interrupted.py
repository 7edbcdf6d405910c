"""Interrupted is a normal state (issue 17, item 2): a run, a merge or a localize cut off at any
moment (Ctrl-C raised from inside, or SIGKILL of a real process) finishes on the next call with
every output, report included, and its records and summary byte-identical to an uninterrupted
run's. The cut-off session (no `seconds`) is shown in the report as interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from exp_fixtures import build_models, gain_donor
from tiny_world import base_config, write_dataset
from weightgraft.experiments import result_files
from weightgraft.experiments.config import parse_config
from weightgraft.pipelines import run as run_pipeline
from weightgraft.pipelines import run_all
from weightgraft.pipelines.run import merge_run
from weightgraft.reporting.summary import RunSummary

EXPERIMENTS = [
    {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", "SFT", "FE+LT"]},
    {"name": "f", "dataset": "relation", "recipient": "pre", "donor": "task", "conditions": ["LT", "SFT"]},
    {"localize": "loc", "dataset": "relation", "donor": "gain", "max_examples": 4, "steps": 2, "batch_size": 4},
]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(root / "home"))
        models = build_models(root / "models", layers=2)
        models["gain"] = gain_donor(models["pre"], root / "models" / "gain")
        yield models, write_dataset(root / "data"), root


def config(world, **changes):
    models, data, _ = world
    return parse_config({**base_config(models, data, EXPERIMENTS), "bootstrap": 20, **changes})


def outputs(out: Path) -> dict[str, bytes]:
    """Every result a run leaves whose bytes must not depend on interruptions: the records,
    state files, summary, the localize results, and the report above its provenance section."""
    files = [*out.glob("examples/*/*.parquet"), *out.glob("state/*.json"), out / "summary.csv"]
    files = [p for p in files if ".shard-" not in p.name]  # a merged run's shards' own files
    files += [out / "localize" / "loc" / name for name in ("localize.json", "ranking.parquet", "curve.parquet")]
    found = {str(p.relative_to(out)): p.read_bytes() for p in files}
    report = (out / "report.md").read_text()
    found["report.md (results)"] = report.split("## Provenance")[0].encode()
    assert (out / "report.html").is_file()
    return found


def without_seconds(body: bytes) -> bytes:
    summary = json.loads(body)
    summary.pop("seconds")
    return json.dumps(summary, sort_keys=True).encode()


def comparable(found: dict[str, bytes]) -> dict[str, bytes]:
    key = "localize/loc/localize.json"
    return dict(found, **{key: without_seconds(found[key])})


@pytest.fixture(scope="module")
def clean(world, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "run"
    run_all(config(world), out, progress=False)
    return comparable(outputs(out))


class Cut(KeyboardInterrupt):
    """Ctrl-C, raised by the test at a chosen moment."""


def cut_after(patch, owner, name: str, calls: int) -> None:
    """Let `owner.name` run `calls` times, then raise Ctrl-C instead of the next call."""
    real = getattr(owner, name)
    seen = []

    def wrapper(*args, **kwargs):
        if len(seen) >= calls:
            raise Cut
        seen.append(1)
        return real(*args, **kwargs)

    patch.setattr(owner, name, wrapper)


def moments():
    """name -> (module, function, calls let through, whether the runner's session is cut)."""
    import importlib

    from weightgraft.attribution import attribution_plots as localize_plots

    localize_module = importlib.import_module("weightgraft.attribution.experiment")  # the name run_localize calls
    return {
        "before the first result": (result_files, "write_condition", 0, True),
        "after one result": (result_files, "write_condition", 1, True),
        "after three results": (result_files, "write_condition", 3, True),
        "in localize's search": (localize_module, "localize", 0, False),
        "while localize saves its pictures": (localize_plots, "recovery_curve", 0, False),
        "in the summary": (RunSummary, "write", 0, False),
        "in the report": (run_pipeline, "write_report", 0, False),
    }


@pytest.mark.parametrize("moment", list(moments()))
def test_a_run_cut_at_any_moment_finishes_identically_on_the_next_call(world, clean, tmp_path, moment):
    owner, name, calls, in_runner = moments()[moment]
    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        cut_after(patch, owner, name, calls)
        with pytest.raises(Cut):
            run_all(config(world), out, progress=False)
    status = json.loads((out / "run.json").read_text())["sessions"][-1]["status"]
    assert status == ("interrupted" if in_runner else "complete")
    run_all(config(world), out, progress=False)
    assert comparable(outputs(out)) == clean
    report = (out / "report.md").read_text()
    assert "2 session(s)" in report and (" interrupted (" in report) == in_runner


def test_a_run_cut_twice_then_finished_reports_three_sessions(world, clean, tmp_path):
    out = tmp_path / "run"
    for calls in (1, 3):
        with pytest.MonkeyPatch.context() as patch:
            cut_after(patch, result_files, "write_condition", calls)
            with pytest.raises(Cut):
                run_all(config(world), out, progress=False)
    run_all(config(world), out, progress=False)
    assert comparable(outputs(out)) == clean
    assert "3 session(s)" in (out / "report.md").read_text()


KILL_AFTER_ONE_RESULT = """
import os, signal, sys
sys.path[:0] = {paths!r}
from weightgraft.experiments import result_files
from weightgraft.experiments.config import parse_config
from weightgraft.pipelines import run_all
real = result_files.write_condition
def write_then_die(*args):
    real(*args)
    os.kill(os.getpid(), signal.SIGKILL)
result_files.write_condition = write_then_die
run_all(parse_config({config!r}), {out!r}, progress=False)
"""


def test_a_run_killed_outright_finishes_identically_on_the_next_call(world, clean, tmp_path):
    out = tmp_path / "run"
    script = KILL_AFTER_ONE_RESULT.format(
        paths=[p for p in sys.path if p], config=config(world).model_dump(mode="json"), out=str(out)
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert json.loads((out / "run.json").read_text())["sessions"][-1]["status"] == "running"
    run_all(config(world), out, progress=False)
    assert comparable(outputs(out)) == clean
    assert " interrupted; " in (out / "report.md").read_text()  # killed: no counts, no seconds


@pytest.mark.parametrize("moment", ["merging", "in the report"])
def test_a_merge_cut_off_finishes_identically_on_the_next_call(world, clean, tmp_path, moment):
    from weightgraft.experiments import shards

    out = tmp_path / "run"
    for index in range(2):
        run_all(config(world), out, progress=False, shard=(index, 2))
    owner, name = (shards, "merge_experiment") if moment == "merging" else (run_pipeline, "write_report")
    with pytest.MonkeyPatch.context() as patch:
        cut_after(patch, owner, name, 1 if moment == "merging" else 0)
        with pytest.raises(Cut):
            merge_run(out)
    merge_run(out)
    # the localize experiment runs once, at the merge: the merged run is the whole run's, byte for byte
    assert comparable(outputs(out)) == clean
    assert "## Minimal graft: loc" in (out / "report.md").read_text()


def test_localize_command_cut_off_writes_everything_on_the_next_call(world, tmp_path):
    from typer.testing import CliRunner

    from weightgraft.attribution import attribution_plots as localize_plots
    from weightgraft.cli import _register_all, app

    models, data, _ = world
    args = ["localize", "--recipient", models["pre"], "--donor", models["gain"], "--data", data]
    args += ["--max-examples", "4", "--steps", "2", "--no-progress"]
    _register_all()
    clean = tmp_path / "clean"
    assert CliRunner().invoke(app, [*args, "--out", str(clean)]).exit_code == 0
    out = tmp_path / "cut"
    with pytest.MonkeyPatch.context() as patch:
        cut_after(patch, localize_plots, "token_view", 0)
        assert CliRunner().invoke(app, [*args, "--out", str(out)]).exit_code == 130  # Ctrl-C
    done = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert done.exit_code == 0, done.output
    names = sorted(p.name for p in clean.iterdir() if not p.name.startswith("."))
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == names
    for name in ("ranking.parquet", "curve.parquet", "cells.parquet"):
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name


def test_a_failed_localize_item_leaves_the_run_unfinished_not_complete(world, tmp_path):
    """Issue 31, item 6: a `localize:` item that fails (here: the donor is the pretrained model
    and the recipient its finetune, so there is no gain to localize) must not leave run.json
    saying "complete" while no report exists; the next call resumes and finishes."""
    from weightgraft.errors import UserError

    swapped = [*EXPERIMENTS[:2], {**EXPERIMENTS[2], "recipient": "gain", "donor": "pre"}]
    models, data, _ = world
    bad = parse_config({**base_config(models, data, swapped), "bootstrap": 20})
    out = tmp_path / "run"
    with pytest.raises(UserError, match="does not improve"):
        run_all(bad, out, progress=False)
    body = json.loads((out / "run.json").read_text())
    assert body["status"] == "interrupted" and body["sessions"][-1]["status"] == "complete"  # the runner's part
    assert body["unfinished"].startswith("localize loc: the donor does not improve")
    assert not (out / "report.md").exists() and not (out / "summary.csv").exists()
    run_all(config(world), out, progress=False)  # the same experiments, the localize item fixed
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert (out / "report.md").is_file()
