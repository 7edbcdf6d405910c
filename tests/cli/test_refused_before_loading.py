"""What no command may start on: a model that ships its own code (explore too), a device the
machine lacks or no run computes on, a model folder without safetensors (average too), and one
model given twice as recipient and donor or as two members of an average. Each is one line and
exit code 2, before any model is built or loaded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

import weightgraft.cli.explore_commands as explore_commands
import weightgraft.explore.open_session as explore_launch
from bad_input_fixtures import build_world, config_body
from cli_runner import invoke, one_line_error


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("refused"))


@pytest.fixture
def nothing_loads(monkeypatch):
    """The explorer may neither build the built-in models, nor load a model, nor serve a page."""

    def refuse(*args, **kwargs):
        raise AssertionError("reached a model load, a build or the server")

    for name in ("load_model", "load_tokenizer", "ensure_builtin"):
        monkeypatch.setattr(explore_launch, name, refuse)
    monkeypatch.setattr(explore_commands, "serve", refuse)


def _copy(world, name: str, tmp_path: Path, source: str = "pre") -> Path:
    folder = tmp_path / name
    shutil.copytree(world[source], folder)
    return folder


def _with_auto_map(folder: Path, file: str) -> Path:
    path = folder / file
    body = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps(body | {"auto_map": {"AutoConfig": "mine.Config"}}))
    return folder


@pytest.mark.parametrize(
    "where",
    [
        {"recipient": "config.json", "donor": "config.json"},
        {"donor": "tokenizer_config.json"},
        {"recipient": "config.json"},
    ],
)
def test_explore_refuses_models_that_ship_their_own_code(world, tmp_path, nothing_loads, where):
    models = {
        role: _copy(world, role, tmp_path, "pre" if role == "recipient" else "sft") for role in ("recipient", "donor")
    }
    for role, file in where.items():
        _with_auto_map(models[role], file)
    line = one_line_error(
        invoke("explore", "--recipient", models["recipient"], "--donor", models["donor"], "--port", "0")
    )
    first = next(iter(where))
    label = "--recipient" if first == "recipient" else "donor donor"
    assert line.startswith(f"error: {label}: {models[first]} asks to run its own Python code ({where[first]} auto_map")
    assert line.endswith("pass --trust-remote-code, only if you trust that code")


@pytest.mark.parametrize(
    "device, stem",
    [
        ("banana", "Invalid value for '--device': 'banana' is not a device"),
        ("meta", "Invalid value for '--device': 'meta' is not a device"),
        ("mps", "device: 'mps' is not available on this machine"),
    ],
)
def test_explore_checks_its_device_before_building_anything(nothing_loads, device, stem):
    if device == "mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    line = one_line_error(invoke("explore", "--builtin", "tiny", "--device", device, "--port", "0"))
    assert stem in line


def test_explore_asks_for_a_gpu_only_where_torch_sees_one(nothing_loads):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    line = one_line_error(invoke("explore", "--device", "cuda", "--port", "0"))
    assert "device: 'cuda' asks for a GPU, but torch sees no CUDA device here" in line


def test_run_on_the_meta_device_is_refused_before_the_run_starts(world, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(config_body(world)))
    out = tmp_path / "out"
    line = one_line_error(invoke("run", config, "--out", out, "--device", "meta"))
    assert "device: 'meta' is not a device; use cpu, cuda, cuda:N or mps" in line
    assert not out.exists()  # no run folder, so no run recorded as interrupted


@pytest.mark.parametrize(
    "files, stem",
    [
        (("config.json",), "has no *.safetensors weights; re-save it once as safetensors"),
        (("config.json", "pytorch_model.bin"), "has only pickled weights (.bin/.pt), which weightgraft does not load"),
        (("notes.txt",), "is not a model folder (no config.json)"),
    ],
)
def test_average_refuses_a_folder_without_safetensors(world, tmp_path, files, stem):
    folder = tmp_path / "member"
    folder.mkdir()
    for name in files:
        (folder / name).write_text("{}")
    line = one_line_error(invoke("average", world["sft"], folder, "--out", tmp_path / "avg"))
    assert f"error: {folder} {stem}" in line
    assert not (tmp_path / "avg").exists()


def _one_model_twice(world, tmp_path: Path, form: str) -> tuple[Path, str]:
    """The tiny `pre` and a second name for it: its own path, a symlink, or a byte-for-byte copy."""
    if form == "same path":
        return world["pre"], "the same folder"
    if form == "symlink":
        (tmp_path / "link").symlink_to(world["pre"], target_is_directory=True)
        return tmp_path / "link", "the same folder"
    return _copy(world, "copy", tmp_path), "identical weight and config files"


FORMS = ["same path", "symlink", "copy"]


@pytest.mark.parametrize("form", FORMS)
def test_localize_refuses_one_model_as_recipient_and_donor(world, tmp_path, form):
    twin, how = _one_model_twice(world, tmp_path, form)
    outcome = invoke(
        "localize", "--recipient", world["pre"], "--donor", twin, "--data", world["data"], "--out", tmp_path / "loc"
    )
    line = one_line_error(outcome)
    assert line == (
        f"error: --recipient and --donor are one model ({world['pre']} and {twin}: {how}); grafting a model "
        "into itself changes nothing: give as donor a finetune of the recipient"
    )
    assert not (tmp_path / "loc").exists()


@pytest.mark.parametrize("form", FORMS)
def test_explore_refuses_one_model_as_recipient_and_donor(world, tmp_path, nothing_loads, form):
    twin, how = _one_model_twice(world, tmp_path, form)
    line = one_line_error(invoke("explore", "--recipient", world["pre"], "--donors", f"task={twin}", "--port", "0"))
    assert f"error: --recipient and donor task are one model ({world['pre']} and {twin}: {how})" in line


@pytest.mark.parametrize("form", FORMS)
def test_average_refuses_one_model_given_twice(world, tmp_path, form):
    twin, how = _one_model_twice(world, tmp_path, form)
    line = one_line_error(invoke("average", world["pre"], twin, "--out", tmp_path / "avg"))
    assert line == (
        f"error: {world['pre']} and {twin} are one model ({world['pre']} and {twin}: {how}); averaging a model "
        "with itself gives it back: name distinct finetunes of one base model"
    )
    assert not (tmp_path / "avg").exists()


@pytest.mark.parametrize("form", FORMS)
def test_a_run_config_that_grafts_a_model_into_itself_is_refused(world, tmp_path, form):
    twin, how = _one_model_twice(world, tmp_path, form)
    experiment = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", "SFT"]}
    body = config_body(world, models={"pre": str(world["pre"]), "sft": str(twin)}, experiments=[experiment])
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(body))
    line = one_line_error(invoke("run", tmp_path / "run.yaml", "--out", tmp_path / "out"))
    assert "error: experiment 'e', condition 'SFT': models.pre and models.sft are one model (" in line
    assert f": {how}); grafting a model into itself changes nothing" in line
    assert not (tmp_path / "out" / "examples").exists()


def test_only_a_donor_equal_to_its_recipient_is_refused_in_a_run_config(world, tmp_path):
    """Two keys for one model are no mistake where neither is grafted into the other (two donors
    that are one model, a preset's spare role): the run goes on. A condition grafting a copy of
    the recipient from a third key is refused, naming that condition."""
    experiment = {
        "name": "e",
        "dataset": "relation",
        "recipient": "pre",
        "donor": "sft",
        "conditions": ["PRE", "SFT", {"name": "task", "grafts": [{"positions": "FE", "donor": "task"}]}],
    }
    models = {"pre": str(world["pre"]), "sft": str(world["sft"])}
    refused = config_body(
        world, models=models | {"task": str(_copy(world, "copy", tmp_path))}, experiments=[experiment]
    )
    (tmp_path / "refused.yaml").write_text(yaml.safe_dump(refused))
    line = one_line_error(invoke("run", tmp_path / "refused.yaml", "--out", tmp_path / "refused"))
    assert line.startswith("error: experiment 'e', condition 'task': models.pre and models.task are one model (")
    accepted = config_body(world, models=models | {"task": str(world["sft"])}, experiments=[experiment])
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(accepted))
    outcome = invoke("run", tmp_path / "run.yaml", "--out", tmp_path / "out", "--no-progress")
    assert outcome.code == 0, outcome.lines
    assert (tmp_path / "out" / "report.md").exists()
