"""`weightgraft data` never deletes what it did not write, and refuses bad options and bad user
facts with one line naming the line and the fix (issue 9, items 1 and 9). Run as a subprocess."""

from __future__ import annotations

import json

from data_cli_fixtures import first_line, run_cli
from data_fixtures import OTHER_USER_FACT, USER_FACT
from weightgraft.data.io import DATA_FILES, load_facts
from weightgraft.folder_ownership import read_record

SMALL = ["--facts-per-kind", "2", "--relation", "2", "--task", "2", "--texts-per-fact", "2"]


def test_data_refuses_a_nonempty_out_and_overwrite_keeps_the_users_files(tmp_path):
    out = tmp_path / "sets"
    first = run_cli("data", "--out", str(out), *SMALL, "--freetext", "1", "--articles-per-fact", "1")
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "freetext",
        "relation",
        "relation_a2b",
        "relation_b2a",
        "task",
    ]
    (out / "notes.txt").write_text("mine")
    (out / "relation" / "notes.txt").write_text("mine too")
    (out / "mine").mkdir()
    old_facts = (out / "relation" / "facts.jsonl").read_bytes()

    again = run_cli("data", "--out", str(out), *SMALL, "--seed", "1")
    assert again.returncode == 2
    assert first_line(again.stderr) == (
        f"error: {out} exists and is not empty; pass --overwrite to replace "
        "weightgraft's own files in it (other files are kept), or choose another --out"
    )
    assert (out / "relation" / "facts.jsonl").read_bytes() == old_facts

    replaced = run_cli("data", "--out", str(out), *SMALL, "--seed", "1", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "relation" / "notes.txt").read_text() == "mine too"
    assert (out / "mine").is_dir()
    assert (out / "relation" / "facts.jsonl").read_bytes() != old_facts  # seed 1's facts
    assert not (out / "freetext").exists()  # weightgraft's own set from the first run, not asked now
    for name in ("relation", "relation_a2b", "relation_b2a", "task"):
        assert all((out / name / f).is_file() for f in DATA_FILES)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folder left


def test_data_out_dot_with_overwrite_never_empties_the_folder(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    refused = run_cli("data", "--out", ".", *SMALL, cwd=tmp_path)
    assert refused.returncode == 2 and "--overwrite" in first_line(refused.stderr)
    done = run_cli("data", "--out", ".", *SMALL, "--overwrite", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert len(load_facts(tmp_path / "relation")) == 2
    record = read_record(tmp_path)
    assert record.command == "data" and sorted(record.files) == ["relation", "relation_a2b", "relation_b2a", "task"]


def test_bad_counts_are_refused(tmp_path):
    for value, word in (("-5", "-5"), ("0", "0")):
        result = run_cli("data", "--out", str(tmp_path / "x"), "--relation", value)
        assert result.returncode == 2
        assert first_line(result.stderr) == f"error: --relation must be a positive number (got {word})"
    assert not (tmp_path / "x").exists()


def test_bad_user_facts_name_the_line_counting_blank_lines(tmp_path):
    good = USER_FACT
    path = tmp_path / "facts.jsonl"
    other = OTHER_USER_FACT
    path.write_text(
        json.dumps(good) + "\n\n" + json.dumps(other) + "\n\n" + json.dumps({**good, "movie_title": "  "}) + "\n"
    )
    result = run_cli("data", "--out", str(tmp_path / "u"), "--user-facts", str(path))
    assert result.returncode == 2
    assert first_line(result.stderr) == f"error: {path} line 5: movie_title is empty; give a name"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(good).encode() + b"\n")
    result = run_cli("data", "--out", str(tmp_path / "u"), "--user-facts", str(path))
    assert result.returncode == 2
    assert (
        first_line(result.stderr) == f"error: {path} starts with a byte-order mark (BOM); save it as UTF-8 without BOM"
    )
    assert not (tmp_path / "u").exists()
