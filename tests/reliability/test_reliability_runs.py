"""Runs that meet faults: damaged result files (issue 9, item 5, with the fault-injection test),
provenance at the start, permissions and run names (item 11), and checks before loading (item 8).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from exp_fixtures import build_models
from tiny_world import base_config, write_dataset
from weightgraft.errors import UserError
from weightgraft.experiments import execute, result_files, run_folder
from weightgraft.experiments.config import ConfigError, parse_config
from weightgraft.pipelines import run_all

EXPERIMENT = {
    "name": "e",
    "dataset": "relation",
    "recipient": "pre",
    "donor": "sft",
    "conditions": ["PRE", "SFT", "FE+LT", "LT"],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(root / "home"))  # the file-hash cache
        yield build_models(root / "models", layers=2), write_dataset(root / "data")


def config(world, **changes):
    models, data = world
    return parse_config({**base_config(models, data, [EXPERIMENT]), "bootstrap": 50, **changes})


@pytest.fixture(scope="module")
def clean_run(world, tmp_path_factory):
    """One uninterrupted run, made under umask 002 (group-writable, as on a shared machine)."""
    out = tmp_path_factory.mktemp("clean") / "run"  # made by the run, under its umask
    old = os.umask(0o002)
    try:
        run_all(config(world), out, progress=False, report=False)
    finally:
        os.umask(old)
    return out


def file_of(out, condition):
    return run_folder.condition_file(out, "e", condition)


def flip_inside_a_data_page(path):
    """Flip one bit in the payload of the last data page of the `rank` column (the page's bytes
    end where the column chunk ends, so the byte two before the end is page data)."""
    column = pq.ParquetFile(path).metadata.row_group(0).column(result_files.SCHEMA.names.index("rank"))
    start = column.dictionary_page_offset or column.data_page_offset
    end = start + column.total_compressed_size
    data = bytearray(path.read_bytes())
    data[end - 2] ^= 0x04
    path.write_bytes(bytes(data))


def test_damaged_results_are_named_and_recomputed(world, clean_run, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(clean_run, out)
    truncated, flipped = file_of(out, "SFT"), file_of(out, "FE+LT")
    truncated.write_bytes(truncated.read_bytes()[:-100])
    flip_inside_a_data_page(flipped)
    state = run_folder.state_file(out, "e")
    state.unlink()
    capsys.readouterr()

    again = run_all(config(world), out, progress=False, report=False).run
    err = capsys.readouterr().err
    assert (out / "summary.csv").read_text() == (clean_run / "summary.csv").read_text()
    assert sorted(again.computed) == ["e/FE+LT", "e/SFT"]
    assert sorted(again.reused) == ["e/LT", "e/PRE"]
    assert set(again.damaged) == {truncated, flipped}
    for path in (truncated, flipped, state):
        assert f"warning: {path} " in err, err
    assert state.is_file()


def test_a_rewritten_value_with_valid_checksums_is_caught_by_the_recorded_sha256(world, clean_run, tmp_path, capsys):
    """A file rewritten whole (footer, fingerprint and page checksums all valid) with one rank
    changed from 1 to 14: only the sha256 in the state file can tell."""
    out = tmp_path / "run"
    shutil.copytree(clean_run, out)
    path = file_of(out, "PRE")
    table = pq.read_table(path)
    ranks = table.column("rank").to_pylist()
    ranks[0] = 14 if ranks[0] != 14 else 1
    table = table.set_column(table.schema.get_field_index("rank"), "rank", pa.array(ranks, pa.int64()))
    pq.write_table(table, path, write_page_checksum=True)
    capsys.readouterr()
    again = run_all(config(world), out, progress=False, report=False).run
    assert again.computed == ["e/PRE"] and again.damaged == [path]
    assert f"warning: {path} is damaged (its sha256 differs" in capsys.readouterr().err
    assert (out / "summary.csv").read_text() == (clean_run / "summary.csv").read_text()


def test_outputs_follow_the_umask(clean_run):
    for path in [clean_run, *clean_run.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o775 if path.is_dir() else 0o664), (path, oct(mode))


def test_run_json_is_written_at_the_start_and_completed_at_the_end(world, tmp_path, monkeypatch):
    out = tmp_path / "run"
    seen = []
    real_write = result_files.write_condition

    def stop_after_one(path, rows, fingerprint):
        seen.append(json.loads((out / "run.json").read_text()))
        real_write(path, rows, fingerprint)
        raise KeyboardInterrupt

    monkeypatch.setattr(result_files, "write_condition", stop_after_one)
    with pytest.raises(KeyboardInterrupt):
        run_all(config(world), out, progress=False, report=False)
    monkeypatch.undo()
    during = seen[0]
    models, _ = world
    weights = hashlib.sha256(open(f"{models['sft']}/model.safetensors", "rb").read()).hexdigest()
    assert during["status"] == "running" and during["sessions"][-1]["status"] == "running"
    assert during["config"]["name"] == "test" and "started" in during["sessions"][-1]
    assert during["models"]["sft"]["files"]["model.safetensors"] == weights
    after_kill = json.loads((out / "run.json").read_text())
    assert after_kill["status"] == "interrupted"

    run_all(config(world), out, progress=False, report=False)
    final = json.loads((out / "run.json").read_text())
    assert final["status"] == "complete"
    assert [s["status"] for s in final["sessions"]] == ["interrupted", "complete"]
    assert final["sessions"][-1]["computed"] == 3 and final["sessions"][-1]["reused"] == 1
    assert "finished" in final["sessions"][-1]


@pytest.mark.parametrize("name", ["../escape", "/tmp/abs", "a/b", "..", "a\\b", "~x"])
def test_run_names_must_be_plain(world, name):
    with pytest.raises(ConfigError, match="not a plain name"):
        config(world, name=name)


def test_layers_are_checked_before_any_model_loads(world, tmp_path, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded before the config was checked")

    monkeypatch.setattr(execute, "load_model", no_loading)
    models, data = world
    deep = dict(EXPERIMENT, conditions=[{"name": "x", "grafts": [{"positions": "FE", "layers": 100}]}])
    cfg = parse_config(base_config(models, data, [deep]))
    with pytest.raises(UserError, match="layer 100 .* models.pre has 2 layers"):
        run_all(cfg, tmp_path / "run", progress=False, report=False)
    assert not (tmp_path / "run").exists()


def test_dataset_and_model_folders_follow_the_umask(tmp_path):
    """atomic_directory (datasets, pretrained and finetuned models) gives the umask's modes, also
    to files written private, as save_pretrained writes model.safetensors."""
    from weightgraft.folder_install import atomic_directory

    old = os.umask(0o022)
    try:
        with atomic_directory(tmp_path / "set") as tmp:
            (tmp / "sub").mkdir()
            (tmp / "sub" / "eval.jsonl").write_text("{}\n")
            private = tmp / "model.safetensors"
            private.write_bytes(b"x")
            os.chmod(private, 0o600)
    finally:
        os.umask(old)
    for path in [tmp_path / "set", *(tmp_path / "set").rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o755 if path.is_dir() else 0o644), (path, oct(mode))
