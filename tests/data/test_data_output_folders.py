"""Output folders: an occupied folder is refused, and overwriting replaces weightgraft's own
files only (what it recorded writing), through a temp folder beside the target."""

from __future__ import annotations

import hashlib

import pytest

from weightgraft.folder_install import atomic_directory
from weightgraft.folder_ownership import FOLDER_MARK, OutputExistsError, read_record


def _write(folder, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def test_new_and_empty_targets_are_written_whole(tmp_path):
    with atomic_directory(tmp_path / "new") as tmp:
        _write(tmp, {"a.txt": "1", "sub/b.txt": "2"})
    assert (tmp_path / "new" / "sub" / "b.txt").read_text() == "2"
    record = read_record(tmp_path / "new")  # the names written, with what each was
    assert record.files == {"a.txt": hashlib.sha256(b"1").hexdigest(), "sub": FOLDER_MARK}
    (tmp_path / "empty").mkdir()
    with atomic_directory(tmp_path / "empty") as tmp:
        _write(tmp, {"a.txt": "1"})
    assert (tmp_path / "empty" / "a.txt").read_text() == "1"


def test_occupied_target_is_refused_before_the_body_runs(tmp_path):
    _write(tmp_path / "out", {"notes.txt": "mine"})
    ran = []
    with pytest.raises(OutputExistsError, match="exists and is not empty; pass --overwrite"):
        with atomic_directory(tmp_path / "out"):
            ran.append(1)
    assert not ran and (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_overwrite_replaces_own_files_and_keeps_the_users(tmp_path):
    out = tmp_path / "out"
    with atomic_directory(out) as tmp:
        _write(tmp, {"model.safetensors": "old", "shard-2.safetensors": "old", "sub/x.json": "old"})
    _write(out, {"notes.txt": "mine", "sub/mine.txt": "mine"})
    with atomic_directory(out, overwrite=True) as tmp:
        _write(tmp, {"model.safetensors": "new", "sub/x.json": "new"})
    assert (out / "model.safetensors").read_text() == "new" and (out / "sub" / "x.json").read_text() == "new"
    assert not (out / "shard-2.safetensors").exists()  # ours last time, not written now
    assert (out / "notes.txt").read_text() == "mine" and (out / "sub" / "mine.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the temp folder is gone


def test_failed_write_leaves_the_target_as_it_was(tmp_path):
    out = tmp_path / "out"
    _write(out, {"model.safetensors": "old", "notes.txt": "mine"})
    with pytest.raises(RuntimeError):
        with atomic_directory(out, overwrite=True) as tmp:
            _write(tmp, {"model.safetensors": "half"})
            raise RuntimeError("killed")
    assert (out / "model.safetensors").read_text() == "old" and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
