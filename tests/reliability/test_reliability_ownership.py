"""Ownership is proven, never assumed (issue 31, "User files lost", items 1, 2, 3, 9, 13).

A folder is weightgraft's only when its record (`.weightgraft-files`, written last) names the
command that wrote it: `--overwrite` replaces only what the same kind of command wrote; a file
named run.json, provenance.json or localize.json proves nothing; a run of another config is
refused unless `run --overwrite`, which leaves nothing of the old run; symlinked outputs are
followed, and one on another file system is written or refused whole. Each refusal is one line
with exit code 2, before any work."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from cli_runner import invoke, one_line_error
from ownership_fixtures import SMALL, snapshot
from weightgraft import folder_install
from weightgraft.folder_ownership import INSTALLING, OWNED_RECORD, check_whole, read_record


def train_args(world, out: Path, *more: str) -> list[str]:
    model = world["models"]["pre"]
    return ["train", "--model", model, "--data", str(world["built"]), "--out", str(out), "--epochs", "1", *more]


def no_training(monkeypatch) -> list:
    """Record every call of the training loop (a refusal must come before it)."""
    from weightgraft.training import finetune

    calls = []
    monkeypatch.setattr(finetune, "_train", lambda *a, **k: calls.append(a))
    return calls


# ---- item 1: --overwrite deletes only what the same kind of command wrote -----------------------
def test_data_overwrite_refuses_a_model_folder_that_train_wrote(world, tmp_path):
    model = tmp_path / "model"
    assert invoke(*train_args(world, model, "--device", "cpu")).code == 0
    before = snapshot(model)
    assert {"config.json", "model.safetensors", "training_config.json"} <= set(before)
    line = one_line_error(invoke("data", "--out", model, *SMALL, "--overwrite"))
    assert line == (
        f"error: {model} was written by `weightgraft train`, not `weightgraft data`; --overwrite replaces "
        "only what `weightgraft data` wrote, so it would delete that command's files: choose another --out"
    )
    assert snapshot(model) == before


def test_train_overwrite_refuses_a_dataset_folder_before_training(world, tmp_path, monkeypatch):
    dataset = tmp_path / "set"
    assert invoke("data", "--out", dataset, *SMALL).code == 0
    before = snapshot(dataset)
    trained = no_training(monkeypatch)
    line = one_line_error(invoke(*train_args(world, dataset, "--overwrite", "--device", "cpu")))
    assert f"{dataset} was written by `weightgraft data`, not `weightgraft train`" in line
    assert snapshot(dataset) == before and not trained


def test_a_record_names_its_command_and_hashes_what_it_wrote(tmp_path):
    dataset = tmp_path / "set"
    assert invoke("data", "--out", dataset, *SMALL).code == 0
    record = read_record(dataset / "relation")
    assert record.command == "data"
    facts = (dataset / "relation" / "facts.jsonl").read_bytes()
    assert record.files["facts.jsonl"] == hashlib.sha256(facts).hexdigest()


# ---- item 2: a file named like weightgraft's proves nothing -------------------------------------
def users_folder(tmp_path: Path, mark: str, *mine: str) -> Path:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / mark).write_text('{"not": "weightgraft"}')
    for name in mine:
        (folder / name).write_text(f"my {name}")
    return folder


def test_run_refuses_a_folder_whose_run_json_is_not_weightgrafts(world, tmp_path):
    out = users_folder(tmp_path, "run.json", "report.md", "summary.csv")
    before = snapshot(out)
    line = one_line_error(invoke("run", world["root"] / "a.yaml", "--out", out, "--no-progress"))
    assert line == (
        f"error: {out} has a run.json but no record (.weightgraft-files) that weightgraft run wrote the "
        "folder; a file of that name proves nothing, and weightgraft would overwrite the files beside it: "
        "choose a new or empty folder with --out"
    )
    assert snapshot(out) == before


def test_reproduce_refuses_a_folder_whose_provenance_json_is_not_weightgrafts(world, tmp_path):
    out = users_folder(tmp_path, "provenance.json", "report.md")
    before = snapshot(out)
    args = ["reproduce", "--model", world["models"]["pre"], "--out", out, "--device", "cpu", "--facts", "6"]
    line = one_line_error(invoke(*args, "--no-progress"))
    assert "has a provenance.json but no record (.weightgraft-files) that weightgraft reproduce wrote" in line
    assert snapshot(out) == before


def test_localize_refuses_a_folder_whose_localize_json_is_not_weightgrafts(world, tmp_path):
    out = users_folder(tmp_path, "localize.json", "ranking.parquet")
    before = snapshot(out)
    models = world["models"]
    args = ["localize", "--recipient", models["pre"], "--donor", models["sft"], "--data", world["data"]]
    line = one_line_error(invoke(*args, "--out", out))
    assert "has a localize.json but no record (.weightgraft-files) that weightgraft localize wrote" in line
    assert snapshot(out) == before


def test_run_refuses_a_folder_another_command_wrote(world, tmp_path):
    dataset = tmp_path / "set"
    assert invoke("data", "--out", dataset, *SMALL).code == 0
    line = one_line_error(invoke("run", world["root"] / "a.yaml", "--out", dataset, "--no-progress"))
    assert f"{dataset} was written by `weightgraft data`, not `weightgraft run`" in line


# ---- item 3: another config into a finished run folder ------------------------------------------
def test_another_config_into_a_finished_run_is_refused_and_overwrite_leaves_nothing_of_it(world, tmp_path):
    out = tmp_path / "run"
    assert invoke("run", world["root"] / "a.yaml", "--out", out, "--no-progress").code == 0
    assert read_record(out).command == "run" and "examples" in read_record(out).files
    (out / "notes.txt").write_text("mine")
    before = snapshot(out)
    line = one_line_error(invoke("run", world["root"] / "b.yaml", "--out", out, "--no-progress"))
    assert line == (
        f"error: {out} holds a run of another config (its run.json lists other experiments than 'b''s); "
        "pass --overwrite to replace that run (its files are deleted), or choose another --out"
    )
    assert snapshot(out) == before
    assert invoke("run", world["root"] / "b.yaml", "--out", out, "--no-progress", "--overwrite").code == 0
    assert sorted(p.name for p in (out / "examples").iterdir() if p.name != OWNED_RECORD) == ["f"]
    assert sorted(p.name for p in (out / "state").iterdir() if p.name != OWNED_RECORD) == ["f.json"]
    assert json.loads((out / "run.json").read_text())["config"]["name"] == "b"
    assert len(json.loads((out / "run.json").read_text())["sessions"]) == 1  # not the old run's
    assert (out / "notes.txt").read_text() == "mine"


def test_overwrite_takes_no_shard(world, tmp_path):
    line = one_line_error(
        invoke("run", world["root"] / "a.yaml", "--out", tmp_path / "r", "--shard", "0/2", "--overwrite")
    )
    assert "--overwrite replaces a whole run, so it takes no --shard and no multi-process launch" in line


# ---- item 9: a symlinked --out on another file system ---------------------------------------------
def other_file_system(tmp_path: Path) -> Path:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev or not os.access(shm, os.W_OK):
        pytest.skip("no writable folder on another file system (/dev/shm)")
    return shm / f"weightgraft-test-{uuid.uuid4().hex}"


def test_data_overwrite_through_a_symlink_to_another_file_system(tmp_path):
    target = other_file_system(tmp_path)
    try:
        assert invoke("data", "--out", target, *SMALL).code == 0
        link = tmp_path / "link"
        link.symlink_to(target)
        done = invoke("data", "--out", link, *SMALL, "--seed", "1", "--overwrite")
        assert done.code == 0, done.lines
        assert link.is_symlink() and not (target / INSTALLING).exists()
        check_whole(target)
        assert read_record(target).command == "data"
        assert not [p for p in tmp_path.iterdir() if p.name != "link"]  # no temp folder left beside the link
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_a_failed_move_across_file_systems_is_one_line_and_leaves_the_folder_whole(tmp_path, monkeypatch):
    dataset = tmp_path / "set"
    assert invoke("data", "--out", dataset, *SMALL).code == 0
    before = snapshot(dataset)
    real = os.replace

    def across(src, dst):  # a move from the temp folder into the dataset, as across devices
        if Path(src).parent != Path(dst).parent:
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(src, dst)

    monkeypatch.setattr(folder_install.os, "replace", across)
    line = one_line_error(invoke("data", "--out", dataset, *SMALL, "--seed", "1", "--overwrite"))
    assert line.startswith(f"error: {dataset} is on another file system than {tmp_path}, where weightgraft builds")
    monkeypatch.setattr(folder_install.os, "replace", real)
    assert not (dataset / INSTALLING).exists() and snapshot(dataset) == before
    check_whole(dataset)
    assert invoke("data", "--out", dataset, *SMALL, "--seed", "1", "--overwrite").code == 0  # the rerun works


def test_a_mount_point_as_out_is_refused_before_training(world, tmp_path, monkeypatch):
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    real = os.stat

    def stat(path, *args, **kwargs):  # `mounted` as the top of another file system
        found = real(path, *args, **kwargs)
        if os.path.realpath(path) == str(mounted):
            fields = list(found)
            fields[2] += 1  # st_dev
            return os.stat_result(fields)
        return found

    monkeypatch.setattr(os, "stat", stat)
    trained = no_training(monkeypatch)
    line = one_line_error(invoke(*train_args(world, mounted, "--device", "cpu")))
    assert line == (
        f"error: {mounted} is on another file system than {tmp_path}, where weightgraft builds the new "
        "files before moving them in; give a folder inside it as --out"
    )
    assert not trained and not any(mounted.iterdir())


# ---- item 13: symlinked outputs -----------------------------------------------------------------------
def test_data_out_a_symlink_to_an_empty_folder_writes_into_that_folder(tmp_path):
    target, link = tmp_path / "target", tmp_path / "link"
    target.mkdir()
    link.symlink_to(target)
    done = invoke("data", "--out", link, *SMALL)
    assert done.code == 0, done.lines
    assert link.is_symlink() and (target / "relation" / "facts.jsonl").is_file()


def test_train_out_a_symlink_is_followed(world, tmp_path):
    target, link = tmp_path / "target", tmp_path / "link"
    target.mkdir()
    link.symlink_to(target)
    done = invoke(*train_args(world, link, "--device", "cpu"))
    assert done.code == 0, done.lines
    assert link.is_symlink() and (target / "model.safetensors").is_file()
    assert read_record(target).command == "train"


def test_a_symlink_in_place_of_a_recorded_subfolder_is_replaced_as_a_link(tmp_path):
    dataset, elsewhere = tmp_path / "set", tmp_path / "elsewhere"
    assert invoke("data", "--out", dataset, *SMALL).code == 0
    shutil.move(dataset / "relation", elsewhere)
    (dataset / "relation").symlink_to(elsewhere)
    kept = snapshot(elsewhere)
    done = invoke("data", "--out", dataset, *SMALL, "--seed", "1", "--overwrite")
    assert done.code == 0, done.lines
    relation = dataset / "relation"
    assert relation.is_dir() and not relation.is_symlink() and (relation / "facts.jsonl").is_file()
    assert snapshot(elsewhere) == kept  # the link was replaced, never followed
    assert not (dataset / INSTALLING).exists()
    check_whole(dataset)


def test_a_shard_claims_a_folder_while_the_other_shard_is_writing_its_record(tmp_path):
    """Two torchrun ranks claim one run folder side by side: the first one's record, caught
    half-written (the temporary file `write_atomic` renames into place), is not a stranger's
    file. A user's file of any other name still stops the run before it writes anything."""
    from weightgraft.experiments.run_folder import run_folder
    from weightgraft.folder_ownership import OutputExistsError
    from weightgraft.locking import lock_file

    out = tmp_path / "ranks"
    out.mkdir()
    lock_file(out, ".shard-0-of-2").write_text("{}")
    (out / f".{OWNED_RECORD}.k3x9q1.tmp").write_text("# written by weightgraft run\n")
    with run_folder(out, (1, 2)):
        assert read_record(out).command == "run"
    assert (out / f".{OWNED_RECORD}.k3x9q1.tmp").is_file()  # the other process's, left alone

    stranger = tmp_path / "theirs"
    stranger.mkdir()
    (stranger / "notes.tmp").write_text("mine")
    with pytest.raises(OutputExistsError, match="choose a new or empty folder"):
        with run_folder(stranger, (1, 2)):
            pass
    assert sorted(p.name for p in stranger.iterdir()) == ["notes.tmp"]
