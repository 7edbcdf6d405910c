"""Never run a model folder's own code: every Hugging Face load passes `trust_remote_code`, and a
folder whose config maps to its own classes (`auto_map`) is refused with one line naming the
option that allows it, by `reproduce --dry-run`, `train`, `localize` and `run`, before it loads."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import yaml

from cli_runner import invoke, one_line_error
from exp_fixtures import build_models
from tiny_world import base_config, write_dataset

SRC = Path(__file__).resolve().parents[2] / "src" / "weightgraft"
LOADERS = {"from_pretrained", "from_config"}
NO_CODE_LOADERS = {"PeftConfig"}  # reads adapter_config.json only; it has no code to run


def test_every_hugging_face_load_passes_trust_remote_code():
    missing = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in LOADERS:
                continue
            owner = node.func.value
            if isinstance(owner, ast.Name) and owner.id in NO_CODE_LOADERS:
                continue
            if "trust_remote_code" not in {k.arg for k in node.keywords}:
                missing.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not missing, missing


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Two tiny models whose config.json maps AutoModelForCausalLM to a custom.py that would
    leave a marker file if it ever ran, a plain donor, and a dataset folder."""
    root = tmp_path_factory.mktemp("remote")
    models = build_models(root / "models", layers=2)
    marker = root / "FOREIGN_CODE_RAN"
    for key in ("pre", "sft"):
        folder = Path(models[key])
        config = json.loads((folder / "config.json").read_text())
        config["auto_map"] = {"AutoConfig": "custom.Config", "AutoModelForCausalLM": "custom.Model"}
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "custom.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    data = write_dataset(root / "data")
    return root, models, data, marker


def test_reproduce_dry_run_refuses(world, tmp_path):
    root, models, _, marker = world
    line = one_line_error(invoke("reproduce", "--model", models["pre"], "--out", tmp_path / "job", "--dry-run"))
    assert "--model" in line and "auto_map" in line and "--trust-remote-code" in line
    assert not marker.exists()


def test_train_refuses_unless_asked(world, tmp_path):
    root, models, data, marker = world
    line = one_line_error(invoke("train", "--model", models["pre"], "--data", data, "--out", tmp_path / "ft"))
    assert "--model" in line and "custom.Config" in line and "pass --trust-remote-code" in line
    assert not marker.exists() and not (tmp_path / "ft").exists()


def test_localize_refuses_either_model(world, tmp_path):
    root, models, data, marker = world
    for recipient, donor, flag in (
        (models["pre"], models["task"], "--recipient"),
        (models["task"], models["sft"], "--donor"),
    ):
        line = one_line_error(
            invoke("localize", "--recipient", recipient, "--donor", donor, "--data", data, "--out", tmp_path / "loc")
        )
        assert line.startswith(f"error: {flag}: ") and "pass --trust-remote-code" in line
    assert not marker.exists()


def test_run_refuses_unless_the_config_allows_it(world, tmp_path):
    root, models, data, marker = world
    config = base_config({"pre": models["pre"], "sft": models["task"]}, data, [{"preset": "position_grafting"}])
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    line = one_line_error(invoke("run", path, "--out", tmp_path / "run"))
    assert "models.pre" in line and "trust_remote_code: true" in line
    assert not marker.exists()
