"""Installs are whole or not at all (issue 17, item 5): an `--overwrite` of a dataset or model
folder cut off half-way leaves a folder that every reader refuses (it mixes two builds) until the
command runs again, and a dataset file that does not match its manifest's sha256 is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from data_cli_fixtures import run_cli
from exp_fixtures import build_models
from tiny_world import base_config
from weightgraft import folder_install
from weightgraft.data.io import DatasetMismatchError, load_eval_prompts, load_facts, load_manifest, load_train_texts
from weightgraft.experiments.models import check_model_files, load_tokenizer
from weightgraft.folder_install import atomic_directory
from weightgraft.folder_ownership import INSTALLING, IncompleteFolderError

SMALL = ["--facts-per-kind", "2", "--relation", "2", "--task", "2", "--texts-per-fact", "2"]
READERS = [load_eval_prompts, load_facts, load_manifest, load_train_texts]


def cut_install_after(patch, moves: int) -> None:
    """Ctrl-C after `moves` entries of a temp folder have been moved into the target."""
    real, seen = os.replace, []

    def replace(source, target):
        if ".tmp-" in str(source) and ".tmp-" not in str(target):
            if len(seen) >= moves:
                raise KeyboardInterrupt
            seen.append(target)
        return real(source, target)

    patch.setattr(folder_install.os, "replace", replace)


def build(out, seed: str, overwrite: bool = False) -> None:
    from typer.testing import CliRunner

    from weightgraft.cli import _register_all, app

    _register_all()
    args = ["data", "--out", str(out), *SMALL, "--seed", seed] + (["--overwrite"] if overwrite else [])
    done = CliRunner().invoke(app, args)
    if done.exit_code == 130:  # the command turns Ctrl-C into exit code 130
        raise KeyboardInterrupt
    if done.exception is not None:
        raise done.exception


@pytest.mark.parametrize("moves", [1, 2, 4])
def test_a_data_overwrite_cut_off_is_refused_by_every_reader_until_built_again(tmp_path, moves):
    out = tmp_path / "sets"
    build(out, "0")
    with pytest.MonkeyPatch.context() as patch:
        cut_install_after(patch, moves)
        with pytest.raises(KeyboardInterrupt):
            build(out, "1", overwrite=True)
    refused = 0
    for name in ("relation", "relation_a2b", "relation_b2a", "task"):
        for reader in READERS:
            try:
                reader(out / name)
            except (IncompleteFolderError, DatasetMismatchError) as err:
                refused += 1
                assert "mixes two builds" in str(err)
    assert refused, "no reader noticed the half-replaced folder"
    build(out, "1", overwrite=True)  # the same command again makes it whole
    fresh = tmp_path / "fresh"
    build(fresh, "1")
    for name in ("relation", "task"):
        for file in ("facts.jsonl", "train.jsonl", "eval.jsonl", "manifest.json"):
            assert (out / name / file).read_bytes() == (fresh / name / file).read_bytes()
        assert not (out / name / INSTALLING).exists()
    assert not (out / INSTALLING).exists()


def test_a_model_overwrite_cut_off_is_refused_by_the_model_readers(tmp_path):
    models = build_models(tmp_path / "models", layers=1)
    out = tmp_path / "model"
    with atomic_directory(out) as tmp:
        shutil.copytree(models["pre"], tmp, dirs_exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        cut_install_after(patch, 1)
        with pytest.raises(KeyboardInterrupt):
            with atomic_directory(out, overwrite=True) as tmp:
                shutil.copytree(models["sft"], tmp, dirs_exist_ok=True)
    for reader in (check_model_files, load_tokenizer):
        with pytest.raises(IncompleteFolderError, match="was being replaced when weightgraft was stopped"):
            reader(str(out))


def test_a_dataset_file_that_does_not_match_its_manifest_is_refused(tmp_path):
    out = tmp_path / "sets"
    build(out, "0")
    relation = out / "relation"
    load_eval_prompts(relation)
    shutil.copy(out / "task" / "eval.jsonl", relation / "eval.jsonl")  # a file of another build
    with pytest.raises(DatasetMismatchError, match=r"relation/eval.jsonl does not match the sha256"):
        load_eval_prompts(relation)
    load_facts(relation)  # the files that match are read as before


def test_run_refuses_a_mismatched_or_half_replaced_dataset_in_one_line(tmp_path):
    models = build_models(tmp_path / "models", layers=1)
    out = tmp_path / "sets"
    build(out, "0")
    experiment = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE"]}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(base_config(models, str(out / "relation"), [experiment])))
    (out / "relation" / "eval.jsonl").write_text((out / "relation" / "eval.jsonl").read_text() + "\n")
    done = run_cli("run", str(config), "--out", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "eval.jsonl does not match the sha256" in done.stderr
    (out / "relation" / INSTALLING).write_text("eval.jsonl\n")
    done = run_cli("run", str(config), "--out", str(tmp_path / "run"), "--no-progress")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "was being replaced when weightgraft was stopped, so it mixes two builds" in done.stderr


KILL_DURING_INSTALL = """
import os, signal, sys
from weightgraft import folder_install
real, seen = os.replace, []
def replace(source, target):
    if ".tmp-" in str(source) and ".tmp-" not in str(target):
        if len(seen) >= 2:
            os.kill(os.getpid(), signal.SIGKILL)
        seen.append(target)
    return real(source, target)
folder_install.os.replace = replace
sys.argv = ["weightgraft", *sys.argv[1:]]
from weightgraft.cli import main
main()
"""


def test_a_data_overwrite_killed_outright_leaves_a_refused_folder(tmp_path):
    out = tmp_path / "sets"
    build(out, "0")
    args = ["data", "--out", str(out), *SMALL, "--seed", "1", "--overwrite"]
    killed = subprocess.run([sys.executable, "-c", KILL_DURING_INSTALL, *args], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    assert (out / INSTALLING).exists()
    with pytest.raises((IncompleteFolderError, DatasetMismatchError)):
        for name in ("relation", "relation_a2b", "relation_b2a", "task"):
            for reader in READERS:
                reader(out / name)
    build(out, "1", overwrite=True)
    assert not (out / INSTALLING).exists()
    assert [len(load_facts(out / name)) for name in ("relation", "task")] == [2, 2]
