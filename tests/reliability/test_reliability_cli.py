"""Bad input on the real command line: one short message naming the file, field or line and the
fix, exit code 2, and the traceback only with --debug (issue 9, item 8).

Every case runs `weightgraft` in a subprocess, as a user would; the cases run two at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from exp_fixtures import build_models
from tiny_world import write_dataset

ENTRY = "from weightgraft.cli import main; main()"
EXPERIMENT = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE"]}


def weightgraft(*args: str, home: Path) -> subprocess.CompletedProcess:
    """The real command, with this interpreter and environment (PYTHONPATH included); run in a
    folder two levels down in the test's own, so a name such as ../../x stays inside it."""
    env = dict(os.environ, WEIGHTGRAFT_HOME=str(home), OMP_NUM_THREADS="1")
    cwd = home.parent / "cwd" / "deep"
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300
    )


def config(root: Path, file: str, **changes) -> str:
    body = {
        "name": "t",
        "bootstrap": 10,
        "models": {"pre": str(root / "models" / "pre"), "sft": str(root / "models" / "sft")},
        "datasets": {"relation": str(root / "data")},
        "experiments": [EXPERIMENT],
    }
    body.update(changes)
    path = root / f"{file}.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def cases(root: Path) -> dict[str, tuple[list[str], list[str]]]:
    """name -> (command line, fragments the message's first line must hold)."""
    models = root / "models"
    (root / "not_a_model").mkdir()
    (root / "not_a_model" / "notes.txt").write_text("not weights")
    shutil.copytree(models / "sft", models / "deeper")  # a config with one more layer
    cfg = json.loads((models / "deeper" / "config.json").read_text())
    cfg["num_hidden_layers"] += 1
    (models / "deeper" / "config.json").write_text(json.dumps(cfg))
    shutil.copytree(models / "sft", models / "cut")  # a copy cut short, as by a full disk
    weights = (models / "cut" / "model.safetensors").read_bytes()
    (models / "cut" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (root / "bad_yaml.yaml").write_text("name: t\nmodels: {pre: a, sft: b\ndatasets: {}\n")
    (root / "facts.jsonl").write_text('{"actor_a": "Ada Brook"}\n')
    good = lambda name, **kw: ["run", config(root, name, **kw), "--out", str(root / name)]  # noqa: E731
    with_models = lambda **m: {"pre": str(models / "pre"), "sft": str(models / "sft"), **m}  # noqa: E731
    layers_100 = dict(EXPERIMENT, conditions=[{"name": "x", "grafts": [{"positions": "FE", "layers": 100}]}])
    return {
        "missing model path": (
            good("missing_model", models=with_models(pre=str(root / "nope"))),
            ["models.pre", str(root / "nope"), "does not exist", "fix the path"],
        ),
        "not a model": (
            good("not_model", models=with_models(sft=str(root / "not_a_model"))),
            ["models.sft", "not_a_model", "no config.json"],
        ),
        "missing dataset": (
            good("missing_data", datasets={"relation": str(root / "no_data")}),
            ["datasets.relation", "no_data", "does not exist", "weightgraft data"],
        ),
        "models: 5": (good("models5", models=5), ["models5.yaml", "models:", "got 5", "models: {pre:"]),
        "device: banana": (
            good("banana", device="banana"),
            ["banana.yaml", "device:", "'banana' is not a device", "use cpu"],
        ),
        "bad YAML": (["run", str(root / "bad_yaml.yaml")], ["bad_yaml.yaml line 3", "bad YAML", "fix the syntax"]),
        "unknown template": (
            good("template", experiments=[dict(EXPERIMENT, templates=["nosuch"])]),
            ["experiment 'e'", "'nosuch'", "fix `templates`"],
        ),
        "incompatible models": (
            good("deeper", models=with_models(sft=str(models / "deeper"))),
            ["models.pre and models.sft cannot be grafted", "num_hidden_layers 2 vs 3"],
        ),
        "bad user facts": (
            ["data", "--user-facts", str(root / "facts.jsonl"), "--out", str(root / "user_data")],
            ["facts.jsonl line 1", "missing field(s)", "every line needs"],
        ),
        "corrupt safetensors": (
            good("cut", models=with_models(sft=str(models / "cut"))),
            ["models.sft", "cut/model.safetensors is damaged", "download the model again"],
        ),
        "layers: 100": (
            good("layers", experiments=[layers_100]),
            ["condition 'x'", "layer 100", "2 layers", "fix the layers"],
        ),
        "run name outside the runs folder": (
            ["run", config(root, "escape", name="../../x")],
            ["escape.yaml", "name:", "not a plain name"],
        ),
    }


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli_errors")
    build_models(root / "models", layers=2)
    write_dataset(root / "data")
    table = cases(root)
    home = root / "home"
    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = dict(
            zip(table, pool.map(lambda args: weightgraft(*args, home=home), [args for args, _ in table.values()]))
        )
    debug = weightgraft(*table["device: banana"][0], "--debug", home=home)
    return table, procs, debug


@pytest.mark.parametrize(
    "case",
    [
        "missing model path",
        "not a model",
        "missing dataset",
        "models: 5",
        "device: banana",
        "bad YAML",
        "unknown template",
        "incompatible models",
        "bad user facts",
        "corrupt safetensors",
        "layers: 100",
        "run name outside the runs folder",
    ],
)
def test_bad_input_gives_one_line_and_exit_code_2(outcomes, case):
    table, procs, _ = outcomes
    proc = procs[case]
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert lines and lines[0].startswith("error: "), proc.stderr
    for fragment in table[case][1]:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in proc.stderr and len(lines) <= 3


def test_debug_shows_the_traceback(outcomes):
    _, _, debug = outcomes
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert "'banana' is not a device" in debug.stderr.strip().splitlines()[-1]
