"""One writer per folder, and a user's files are never overwritten (issue 17, items 3 and 4).

A second process meets a lock with one line naming the holder; a killed holder's lock is taken
over with a warning. `run`, `demo`, `merge`, `localize` and `reproduce` refuse a folder holding
files that are not their own earlier output, before any work, in one line with exit code 2.
Each CLI case runs the real command in a subprocess."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from data_cli_fixtures import run_cli
from exp_fixtures import build_models
from tiny_world import base_config, write_dataset
from weightgraft.experiments.config import parse_config
from weightgraft.folder_install import atomic_directory
from weightgraft.locking import FolderInUseError, folder_lock, lock_file, sibling_lock_file
from weightgraft.pipelines import run_all

EXPERIMENT = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", "SFT"]}
SMALL = ["--facts-per-kind", "2", "--relation", "2", "--task", "2", "--texts-per-fact", "2"]
HOLD = """
import sys
from weightgraft.locking import folder_lock
with folder_lock(sys.argv[1], sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(root / "home"))
        models, data = build_models(root / "models", layers=2), write_dataset(root / "data")
        config = base_config(models, data, [EXPERIMENT]) | {"bootstrap": 10}
        (root / "config.yaml").write_text(yaml.safe_dump(config))
        yield root, config


def one_error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


class Holder:
    """A real second process holding a lock until closed."""

    def __init__(self, lock: Path, folder: Path):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(lock), str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout.readline().strip() == "held"

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(timeout=60) == 0


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ---- item 3: one writer per folder ------------------------------------------------------------
def test_a_second_run_into_a_locked_folder_is_refused_naming_the_holder(world):
    root, _ = world
    out = root / "locked-run"
    holder = Holder(lock_file(out), out)
    try:
        line = one_error_line(run_cli("run", str(root / "config.yaml"), "--out", str(out), "--no-progress"))
        assert f"{out} is being written by another weightgraft process (pid {holder.proc.pid} on " in line
        assert socket.gethostname() in line and "wait until it finishes" in line
        assert not (out / "run.json").exists()
    finally:
        holder.close()
    assert not lock_file(out).exists()  # released by its holder


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_warning(world, tmp_path, capsys):
    root, config = world
    out = tmp_path / "run"
    out.mkdir()
    stale = {"pid": dead_pid(), "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00"}
    lock_file(out).write_text(json.dumps(stale | {"command": "weightgraft run old.yaml"}))
    run_all(parse_config(config), out, progress=False, report=False)
    err = capsys.readouterr().err
    assert f"taking over the lock left by a process that no longer runs (pid {stale['pid']} " in err
    assert "`weightgraft run old.yaml`" in err
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    assert not lock_file(out).exists()


def test_a_lock_from_another_host_is_refused_with_the_file_to_delete(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    lock = lock_file(out)
    lock.write_text(json.dumps({"pid": 1, "host": "elsewhere", "started": "x", "command": "weightgraft run a"}))
    with pytest.raises(FolderInUseError, match=f"pid 1 on elsewhere.*delete {lock}"):
        with folder_lock(lock, out):
            pass


def test_the_shards_of_one_run_lock_apart_and_merge_locks_the_whole(tmp_path):
    out = tmp_path / "run"
    with folder_lock(lock_file(out, ".shard-0-of-2"), out), folder_lock(lock_file(out, ".shard-1-of-2"), out):
        with folder_lock(lock_file(out), out), folder_lock(lock_file(out), out):  # nested: same process
            pass


def test_a_dataset_being_built_is_locked_against_a_second_builder(tmp_path):
    final = tmp_path / "set"
    holder = Holder(sibling_lock_file(final), final)
    try:
        line = one_error_line(run_cli("data", "--out", str(final), *SMALL))
        assert f"{final} is being written by another weightgraft process (pid {holder.proc.pid} " in line
        ran = []
        with pytest.raises(FolderInUseError):
            with atomic_directory(final) as tmp:
                ran.append(tmp)
        assert not ran and not final.exists()
    finally:
        holder.close()


# ---- item 4: a user's files are never overwritten ---------------------------------------------
def test_run_refuses_a_folder_of_the_users_own_files(world):
    root, _ = world
    out = root / "users-folder"
    out.mkdir()
    (out / "report.md").write_text("my report")
    (out / "summary.csv").write_text("my,numbers\n")
    line = one_error_line(run_cli("run", str(root / "config.yaml"), "--out", str(out), "--no-progress"))
    assert line == (
        f"error: {out} holds files that are not an earlier weightgraft run (it has no run.json); "
        "weightgraft would overwrite them: choose a new or empty folder with --out"
    )
    assert (out / "report.md").read_text() == "my report" and (out / "summary.csv").read_text() == "my,numbers\n"
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "summary.csv"]


def test_run_resumes_its_own_folder_and_keeps_a_users_note_in_it(world, tmp_path):
    root, config = world
    out = tmp_path / "run"
    run_all(parse_config(config), out, progress=False, report=False)
    (out / "notes.txt").write_text("mine")
    again = run_all(parse_config(config), out, progress=False, report=False)
    assert again.reused and not again.computed and (out / "notes.txt").read_text() == "mine"


def test_merge_and_demo_refuse_a_folder_of_the_users_own_files(world):
    root, _ = world
    out = root / "users-demo"
    out.mkdir()
    (out / "report.md").write_text("my report")
    line = one_error_line(run_cli("demo", "--size", "tiny", "--out", str(out), "--home", str(root / "nohome")))
    assert "holds files that are not an earlier weightgraft run (it has no run.json)" in line
    assert not (root / "nohome").exists()  # refused before building anything
    assert (out / "report.md").read_text() == "my report"


def test_localize_refuses_a_folder_of_the_users_own_files(world):
    root, config = world
    out = root / "users-localize"
    out.mkdir()
    (out / "ranking.parquet").write_text("mine")
    models = config["models"]
    args = [
        "localize",
        "--recipient",
        models["pre"],
        "--donor",
        models["sft"],
        "--data",
        config["datasets"]["relation"],
    ]
    line = one_error_line(run_cli(*args, "--out", str(out)))
    assert "holds files that are not an earlier weightgraft localize (it has no localize.json)" in line
    assert (out / "ranking.parquet").read_text() == "mine"


def test_reproduce_refuses_a_folder_of_the_users_own_files_and_deletes_nothing(world):
    root, config = world
    out = root / "users-reproduce"
    mine = out / "checkpoints" / "FMRA_sft" / "my-notes.txt"
    mine.parent.mkdir(parents=True)
    mine.write_text("mine")
    args = ["reproduce", "--model", config["models"]["pre"], "--out", str(out), "--device", "cpu", "--facts", "6"]
    line = one_error_line(run_cli(*args, "--no-progress"))
    assert "holds files that are not an earlier weightgraft reproduce (it has no provenance.json)" in line
    assert mine.read_text() == "mine"


def test_reproduce_keeps_a_checkpoints_folder_it_did_not_stamp(world, tmp_path):
    """Even inside its own job folder, a checkpoints folder without weightgraft's stamp is
    refused, not deleted ("checkpoints of other inputs, removed" used to delete it)."""
    from weightgraft.folder_ownership import OutputExistsError
    from weightgraft.paper.reproduce_job import ReproduceOptions, plan_job
    from weightgraft.pipelines import reproduce as pipeline

    root, config = world
    out = tmp_path / "job"
    job = plan_job(ReproduceOptions(model=config["models"]["pre"], out=out, device="cpu", facts=6))
    ft = next(iter(job.finetunes.values()))
    ft.checkpoints.mkdir(parents=True)
    (ft.checkpoints / "my-notes.txt").write_text("mine")
    run = pipeline.Pipeline(job, progress=False, echo=lambda text: None)
    run.model_paths["pre"], run.fingerprints["pre"] = config["models"]["pre"], "x"
    data = {ft.dataset: {"manifest_sha256": "y"}}
    with pytest.raises(OutputExistsError, match=f"{ft.checkpoints} holds files weightgraft did not write"):
        run.run_finetune(ft, data)
    assert (ft.checkpoints / "my-notes.txt").read_text() == "mine"


def test_a_lock_file_that_is_not_weightgrafts_is_refused_with_the_file_to_delete(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    lock = lock_file(out)
    lock.write_text("not json")
    with pytest.raises(FolderInUseError, match=f"locked by {lock}, which weightgraft cannot read.*delete {lock}"):
        with folder_lock(lock, out):
            pass
    assert lock.read_text() == "not json"


@pytest.mark.parametrize("body", ["{}", '{"pid": "12", "host": "h"}', '{"host": "h", "started": "x"}'])
def test_a_lock_that_names_no_holder_is_unreadable_not_pid_none(tmp_path, body):
    """JSON without an int pid and a host is no weightgraft lock: the refusal says so and names the
    file to delete, rather than describing a holder "pid None on None"."""
    out = tmp_path / "run"
    out.mkdir()
    lock_file(out).write_text(body)
    with pytest.raises(FolderInUseError) as err:
        with folder_lock(lock_file(out), out):
            pass
    assert str(err.value) == (
        f"{out} is locked by {lock_file(out)}, which weightgraft cannot read; if no weightgraft process is "
        f"writing {out}, delete {lock_file(out)} and run again"
    )
