"""Deletion is confined (issue 17, item 1): weightgraft deletes only entries it recorded writing,
directly inside the folder it was given, by plain name; a record naming `..`, `.`, a path or an
absolute name is refused with one line, never obeyed, and a symlink is removed as a link."""

from __future__ import annotations

import os

import pytest

from data_cli_fixtures import first_line, run_cli
from weightgraft.folder_install import atomic_directory
from weightgraft.folder_ownership import OWNED_RECORD, UntrustedRecordError, remove_entry

SMALL = ["--facts-per-kind", "2", "--relation", "2", "--task", "2", "--texts-per-fact", "2"]


def _own_folder(parent):
    """parent/out written by weightgraft, beside a user's file in parent and one in out."""
    (parent / "users.txt").write_text("the user's")
    out = parent / "out"
    with atomic_directory(out) as tmp:
        (tmp / "a.txt").write_text("ours")
    (out / "notes.txt").write_text("the user's")
    return out


@pytest.mark.parametrize("line", ["..", ".", "/etc", "../users.txt", "sub/../..", "a\\b"])
def test_an_untrusted_record_line_is_refused_and_nothing_is_deleted(tmp_path, line):
    out = _own_folder(tmp_path)
    (out / OWNED_RECORD).write_text(f"a.txt\n{line}\n")
    ran = []
    with pytest.raises(UntrustedRecordError, match="which is not a file in .*delete that line"):
        with atomic_directory(out, overwrite=True) as tmp:
            ran.append(tmp)
    assert not ran  # refused before any work
    assert (tmp_path / "users.txt").read_text() == "the user's"
    assert (out / "notes.txt").read_text() == "the user's" and (out / "a.txt").read_text() == "ours"


def test_a_symlink_out_of_the_folder_is_removed_as_a_link_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("keep")
    out = _own_folder(tmp_path)
    os.symlink(outside, out / "linked")
    (out / OWNED_RECORD).write_text("a.txt\nlinked\n")
    with atomic_directory(out, overwrite=True) as tmp:
        (tmp / "a.txt").write_text("new")
    assert not (out / "linked").is_symlink() and (outside / "precious.txt").read_text() == "keep"
    assert (out / "a.txt").read_text() == "new" and (out / "notes.txt").read_text() == "the user's"


@pytest.mark.parametrize("name", ["", ".", "..", "/tmp", "a/b", "../x"])
def test_remove_entry_takes_plain_names_only(tmp_path, name):
    (tmp_path / "x").write_text("keep")
    with pytest.raises(UntrustedRecordError, match="not a plain name"):
        remove_entry(tmp_path / "sub", name)
    assert (tmp_path / "x").read_text() == "keep"


def test_data_overwrite_refuses_a_record_naming_the_parent_in_one_line(tmp_path):
    out = tmp_path / "parent" / "set"
    assert run_cli("data", "--out", str(out), *SMALL).returncode == 0
    (tmp_path / "parent" / "users.txt").write_text("the user's")
    with (out / OWNED_RECORD).open("a") as record:
        record.write("..\n")
    refused = run_cli("data", "--out", str(out), *SMALL, "--overwrite")
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert first_line(refused.stderr).startswith(f"error: {out / OWNED_RECORD} line ")
    assert "'..'" in refused.stderr and "delete that line" in refused.stderr
    assert (tmp_path / "parent" / "users.txt").read_text() == "the user's"
    assert (out / "relation" / "facts.jsonl").is_file()


def test_an_untrusted_line_in_a_nested_record_stops_before_anything_moves(tmp_path):
    out = tmp_path / "out"
    with atomic_directory(out) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "x.txt").write_text("old")
        (tmp / "z.txt").write_text("old")
    (out / "sub" / OWNED_RECORD).write_text("x.txt\n..\n")
    with pytest.raises(UntrustedRecordError, match=r"sub/\.weightgraft-files line 2 names '\.\.'"):
        with atomic_directory(out, overwrite=True) as tmp:
            (tmp / "z.txt").write_text("new")
    assert (out / "z.txt").read_text() == "old" and (out / "sub" / "x.txt").read_text() == "old"
