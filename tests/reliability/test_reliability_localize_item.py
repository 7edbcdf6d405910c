"""A failing `localize:` item of a run config names its experiment and reads cleanly (issue 41,
item 12): it said "donor 'donor'" for the donor, gave the engine's Python call as the fix, and did
not say which experiment failed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from bad_input_fixtures import build_world, config_body
from cli_runner import invoke, one_line_error


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(root / "home"))
        yield build_world(root)


def twin(world, tmp_path: Path, **fields) -> str:
    """A copy of the tiny `pre` with `fields` added to its config.json."""
    folder = tmp_path / "twin"
    shutil.copytree(world["pre"], folder)
    body = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(body | fields))
    return str(folder)


def run_with_localize(world, tmp_path: Path, donor: str, **changes) -> str:
    body = config_body(world, **changes)
    body["models"]["twin"] = donor
    body["experiments"].append({"localize": "where", "dataset": "relation", "recipient": "pre", "donor": "twin"})
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(body))
    return one_line_error(invoke("run", config, "--out", tmp_path / "run", "--no-progress"))


def test_a_localize_item_over_models_that_cannot_be_grafted_names_it_and_its_donor(world, tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))
    line = run_with_localize(world, tmp_path, twin(world, tmp_path, layer_norm_epsilon=0.5))
    assert line.startswith("error: localize experiment 'where': models.pre and models.twin cannot be grafted:")
    assert "recipient and models.twin have configs that differ" in line
    assert "donor 'donor'" not in line and "Grafter(" not in line and "None" not in line
    assert "allow_config_differences: ['layer_norm_epsilon'] in a run config" in line
    unfinished = json.loads((tmp_path / "run" / "run.json").read_text())["unfinished"]
    assert unfinished.startswith("localize where: models.pre and models.twin cannot be grafted")


def test_a_localize_item_whose_donor_gains_nothing_names_it(world, tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))
    donor = twin(world, tmp_path, weightgraft_note="a twin")
    line = run_with_localize(world, tmp_path, donor, allow_config_differences=["weightgraft_note"])
    assert line.startswith("error: localize experiment 'where': the donor does not improve on the recipient")
    assert line.count("localize experiment") == 1


def test_a_lock_that_does_not_say_when_it_was_taken_is_described_without_none(tmp_path):
    import os
    import socket

    from weightgraft.locking import FolderInUseError, folder_lock

    lock = tmp_path / ".weightgraft-lock"
    lock.write_text(json.dumps({"pid": os.getppid(), "host": socket.gethostname()}))  # a live process
    with pytest.raises(FolderInUseError) as err:
        with folder_lock(lock, tmp_path):
            pass
    assert f"(pid {os.getppid()} on {socket.gethostname()}); wait until it finishes" in str(err.value)
    assert "started None" not in str(err.value) and "`None`" not in str(err.value)
