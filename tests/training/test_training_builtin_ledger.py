"""The built-in build resumes through its ledger (`weightgraft.ledger`, `provenance.json`): a
finished step is never redone, a step whose recipe or upstream outputs changed is rebuilt, a
step cut off leaves no record and nothing half-written, a cache built before the ledger is
adopted, and a build killed between steps goes on at the first step not recorded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training_fixtures import tiny_artifacts, tiny_home
from weightgraft.folder_install import atomic_directory
from weightgraft.ledger import Ledger
from weightgraft.training import builtin, builtin_specs
from weightgraft.training.builtin import BuildStep, ensure_builtin, run_step


class Writer:
    """A step's build: writes `text` into `folder/value.txt` (atomically), counting its calls."""

    def __init__(self, folder: Path, text: str, fail: bool = False):
        self.folder, self.text, self.fail, self.calls = folder, text, fail, 0

    def __call__(self, worlds) -> None:
        self.calls += 1
        with atomic_directory(self.folder) as tmp:
            (tmp / "value.txt").write_text(self.text)
            if self.fail:
                raise KeyboardInterrupt  # cut off with the folder half-written


def run(root: Path, step: BuildStep) -> float | None:
    ledger = Ledger(root / "provenance.json", {"test": True}, base=root)
    return run_step(ledger, step, builtin._WorldOnce(builtin_specs.SPECS["tiny"]), "tiny", progress=False)


def step(name: str, writer: Writer, recipe: dict, after: tuple[str, ...] = ()) -> BuildStep:
    return BuildStep(name, (writer.folder,), recipe, after, writer)


def test_a_done_step_is_reused_and_a_changed_recipe_or_upstream_output_rebuilds(tmp_path):
    a, b = Writer(tmp_path / "a", "one"), Writer(tmp_path / "b", "from a")
    assert run(tmp_path, step("a", a, {"n": 1})) is not None
    assert run(tmp_path, step("b", b, {}, ("a",))) is not None
    assert run(tmp_path, step("a", a, {"n": 1})) is None and run(tmp_path, step("b", b, {}, ("a",))) is None
    assert (a.calls, b.calls) == (1, 1)
    shutil.rmtree(a.folder)  # rebuilt with the same bytes: what reads it is still done
    assert run(tmp_path, step("a", a, {"n": 1})) is not None
    assert run(tmp_path, step("b", b, {}, ("a",))) is None
    a.text = "two"  # a new recipe gives new bytes: a is rebuilt, and b after it
    assert run(tmp_path, step("a", a, {"n": 2})) is not None
    assert (a.folder / "value.txt").read_text() == "two"
    assert run(tmp_path, step("b", b, {}, ("a",))) is not None
    assert (a.calls, b.calls) == (3, 2)
    steps = json.loads((tmp_path / "provenance.json").read_text())["steps"]
    assert steps["a"]["inputs"]["recipe"] == {"n": 2} and steps["a"]["paths"] == ["a"]  # relative: the cache can move


def test_a_step_cut_off_leaves_no_record_and_nothing_half_written(tmp_path):
    cut = Writer(tmp_path / "a", "one", fail=True)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, step("a", cut, {}))
    assert not cut.folder.exists() and not list(tmp_path.glob(".a.tmp-*"))
    assert (
        not (tmp_path / "provenance.json").exists()
        or "a" not in json.loads((tmp_path / "provenance.json").read_text())["steps"]
    )
    cut.fail = False
    assert run(tmp_path, step("a", cut, {})) is not None and cut.calls == 2


def test_outputs_without_a_record_are_adopted_whole_or_rebuilt_when_partial(tmp_path):
    old = Writer(tmp_path / "a", "built before the ledger")
    old(None)
    assert run(tmp_path, step("a", old, {})) is None and old.calls == 1
    record = json.loads((tmp_path / "provenance.json").read_text())["steps"]["a"]
    assert record["seconds"] is None and record["outputs"]["sha256"]["a"]
    first, second = Writer(tmp_path / "p", "p"), Writer(tmp_path / "q", "q")
    first(None)  # a two-folder step of which only the first was put in place
    both = BuildStep("pq", (first.folder, second.folder), {}, (), lambda worlds: (first(worlds), second(worlds)))
    assert run(tmp_path, both) is not None
    assert (first.calls, second.calls) == (2, 1)


def copy_of_tiny(tmp_path: Path) -> tuple[Path, builtin.BuiltinArtifacts]:
    art = tiny_artifacts()
    home = tmp_path / "home"
    shutil.copytree(art.root, home / art.root.name)
    return home, builtin.builtin_artifacts("tiny", home)


KILL_AT_FREETEXT = """
import os, signal, sys
from pathlib import Path
from weightgraft.training import builtin

real = builtin._finetune

def finetune(art, config, data, out, progress, worlds):
    if out.name == "freetext":
        os.kill(os.getpid(), signal.SIGKILL)  # between the task model's step and this one
    real(art, config, data, out, progress, worlds)

builtin._finetune = finetune
builtin.ensure_builtin("tiny", home=Path(sys.argv[1]), progress=False)
"""


def test_a_build_killed_between_steps_resumes_from_its_ledger(tmp_path):
    home, art = copy_of_tiny(tmp_path)
    for model in (art.task_model, art.freetext_model):
        shutil.rmtree(model)
    killed = subprocess.run([sys.executable, "-c", KILL_AT_FREETEXT, str(home)], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr[-2000:]
    ledger = json.loads((art.root / "provenance.json").read_text())
    assert ledger["sessions"][-1]["computed"] == ["task model"]
    assert (art.task_model / "model.safetensors").is_file() and not art.freetext_model.exists()
    stamps = {p: (p / "model.safetensors").stat().st_mtime_ns for p in (art.pretrained, art.task_model)}
    resumed = ensure_builtin("tiny", home=home, progress=False)
    assert set(resumed.seconds) == {"free-text model"}
    assert {p: (p / "model.safetensors").stat().st_mtime_ns for p in stamps} == stamps
    assert (art.freetext_model / "model.safetensors").is_file()


def test_a_cache_built_before_the_ledger_is_adopted_with_the_fingerprints_a_build_records(tmp_path):
    home, art = copy_of_tiny(tmp_path)
    built = json.loads((art.root / "provenance.json").read_text())["steps"]
    (art.root / "provenance.json").unlink()
    assert ensure_builtin("tiny", home=home, progress=False).seconds == {}
    adopted = json.loads((art.root / "provenance.json").read_text())["steps"]
    assert (
        set(adopted)
        == set(built)
        == {s.name for s in builtin.builtin_steps(builtin_specs.SPECS["tiny"], art, False, True)}
    )
    for name, record in adopted.items():
        assert record["seconds"] is None
        assert record["outputs"] == built[name]["outputs"] and record["inputs"] == built[name]["inputs"], name
    assert ensure_builtin("tiny", home=tiny_home(), progress=False).seconds == {}


def test_averaged_models_are_built_from_member_steps_that_resume_one_by_one(tmp_path, monkeypatch):
    """With `averaged_seeds` 2 the relation and one-direction models are each the mean of two
    finetunes, each its own step: the seed-0 member is the single finetune bit for bit, and a
    lost average is rebuilt from the members without training them again."""
    from dataclasses import replace

    from safetensors.torch import load_file

    home, art = copy_of_tiny(tmp_path)
    single = load_file(art.relation_model / "model.safetensors")
    monkeypatch.setitem(builtin_specs.SPECS, "tiny", replace(builtin_specs.SPECS["tiny"], averaged_seeds=2))
    built = ensure_builtin("tiny", home=home, progress=False)
    assert set(built.seconds) == {
        f"{model}{member}"
        for model in ("relation model", "one-direction (B2A) model")
        for member in (", seed 0", ", seed 1", "")
    }
    members = [load_file(art.root / "models" / "members" / f"relation-seed{s}" / "model.safetensors") for s in (0, 1)]
    averaged = load_file(art.relation_model / "model.safetensors")
    name = "model.layers.3.mlp.down_proj.weight"
    assert all(torch.equal(members[0][k], single[k]) for k in single)
    assert not torch.equal(members[0][name], members[1][name])
    for key, tensor in averaged.items():
        assert torch.equal(tensor, ((members[0][key].double() + members[1][key].double()) / 2).float()), key
    shutil.rmtree(art.relation_model)
    assert set(ensure_builtin("tiny", home=home, progress=False).seconds) == {"relation model"}
    assert torch.equal(load_file(art.relation_model / "model.safetensors")[name], averaged[name])


def test_a_damaged_output_makes_its_step_run_again(tmp_path):
    """Issue 31: every file a step reuses is checked against the sha256 recorded when it was
    written; a changed byte (same size, new mtime) or a removed file inside the folder rebuilds."""
    a = Writer(tmp_path / "a", "one")
    assert run(tmp_path, step("a", a, {})) is not None
    assert run(tmp_path, step("a", a, {})) is None and a.calls == 1
    value = a.folder / "value.txt"
    value.write_text("onE")  # same size, other bytes
    assert run(tmp_path, step("a", a, {})) is not None and a.calls == 2
    assert value.read_text() == "one"
    os.utime(value, ns=(1, 1))  # only the mtime moved: the bytes are checked, and they match
    assert run(tmp_path, step("a", a, {})) is None and a.calls == 2
    value.unlink()
    assert run(tmp_path, step("a", a, {})) is not None and a.calls == 3
