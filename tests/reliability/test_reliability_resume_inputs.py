"""A resumed run equals a fresh run whatever changed in its inputs (issue 17, item 6): a model's
weights, any field of the dataset that a record copies, and the config's batching. After each
change, resuming the old run folder recomputes what the change touches, and its records equal a
fresh run's on the changed inputs byte for byte."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from exp_fixtures import build_models, gain_donor
from tiny_world import base_config, write_dataset
from weightgraft.experiments import result_files
from weightgraft.experiments.config import parse_config
from weightgraft.pipelines import run_all

EXPERIMENT = {
    "name": "e",
    "dataset": "relation",
    "recipient": "pre",
    "donor": "sft",
    "conditions": ["PRE", "SFT", "LT"],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(root / "home"))
        yield build_models(root / "models", layers=2), write_dataset(root / "data"), root


def copy_world(world, tmp_path) -> tuple[dict, Path]:
    models, data, _ = world
    mine = {k: str(tmp_path / "models" / k) for k in models}
    for key, path in models.items():
        shutil.copytree(path, mine[key])
    shutil.copytree(data, tmp_path / "data")
    return mine, tmp_path / "data"


def config(models, data, **changes):
    return parse_config({**base_config(models, str(data), [EXPERIMENT]), "bootstrap": 10, **changes})


def results(out: Path) -> dict[str, bytes]:
    found = {p.name: p.read_bytes() for p in sorted(out.glob("examples/e/*.parquet"))}
    return found | {"summary.csv": (out / "summary.csv").read_bytes()}


def resumed_and_fresh(world, tmp_path, change, **config_changes):
    """Run, change an input, resume: the resumed run's result and a fresh run's records."""
    models, data = copy_world(world, tmp_path)
    out = tmp_path / "run"
    run_all(config(models, data), out, progress=False, report=False)
    change(models, data)
    resumed = run_all(config(models, data, **config_changes), out, progress=False, report=False).run
    fresh = tmp_path / "fresh"
    run_all(config(models, data, **config_changes), fresh, progress=False, report=False)
    return resumed, results(out), results(fresh)


def test_a_changed_donor_weight_is_recomputed(world, tmp_path):
    def change(models, data):
        path = Path(models["sft"]) / "model.safetensors"
        tensors = load_file(path)
        name = next(k for k in tensors if "layers.1.mlp.down_proj" in k)
        tensors[name] = tensors[name] + 0.5 * torch.ones_like(tensors[name])
        save_file(tensors, path, metadata={"format": "pt"})

    resumed, after, fresh = resumed_and_fresh(world, tmp_path, change)
    assert {"e/LT", "e/SFT"} <= set(resumed.computed)
    assert after == fresh


@pytest.mark.parametrize(
    ("field", "value"),
    [("fact_kind", "real_shuffled"), ("fact_id", "renamed-fact"), ("reversed", True), ("template_id", "paper_9")],
)
def test_a_changed_prompt_field_that_records_copy_is_recomputed(world, tmp_path, field, value):
    def change(models, data):
        lines = (data / "eval.jsonl").read_text().splitlines()
        first = json.loads(lines[0])
        assert first[field] != value
        first[field] = value
        (data / "eval.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")

    resumed, after, fresh = resumed_and_fresh(world, tmp_path, change)
    assert sorted(resumed.computed) == ["e/LT", "e/PRE", "e/SFT"], field
    assert after == fresh
    column = "template" if field == "template_id" else field
    table = result_files.read_condition(next((tmp_path / "run" / "examples" / "e").glob("*.parquet")))
    assert value in table[column]


@pytest.mark.parametrize(("option", "value"), [("conditions_per_chunk", 1), ("max_batch_tokens", 16)])
def test_a_changed_batching_is_recomputed(world, tmp_path, option, value):
    resumed, after, fresh = resumed_and_fresh(world, tmp_path, lambda models, data: None, **{option: value})
    assert resumed.computed and not set(resumed.reused) & {"e/SFT", "e/LT"}, option
    assert after == fresh


def test_an_unchanged_resume_reuses_everything(world, tmp_path):
    resumed, after, fresh = resumed_and_fresh(world, tmp_path, lambda models, data: None)
    assert resumed.computed == [] and len(resumed.reused) == 3
    assert after == fresh


def localize_world(world, tmp_path, monkeypatch, **config) -> tuple:
    """(config, its localize spec, the copied dataset, the searches made so far) on a copy of the
    world, with a donor that gains and every search counted."""
    import importlib

    models, data = copy_world(world, tmp_path)
    models["gain"] = gain_donor(models["pre"], tmp_path / "models" / "gain")
    loc = {"localize": "loc", "dataset": "relation", "donor": "gain", "steps": 2}
    cfg = parse_config({**base_config(models, str(data), [EXPERIMENT, loc]), "bootstrap": 10, **config})
    module = importlib.import_module("weightgraft.attribution.experiment")  # the name run_localize calls
    calls = []
    real = module.localize

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "localize", counted)
    return cfg, cfg.localizations()[0], data, calls


def test_a_localize_experiment_is_searched_again_when_its_dataset_changes(world, tmp_path, monkeypatch):
    from weightgraft.attribution.experiment import run_localize

    cfg, spec, data, calls = localize_world(world, tmp_path, monkeypatch)
    out = tmp_path / "run"
    run_localize(cfg, spec, out, progress=False)
    run_localize(cfg, spec, out, progress=False)
    assert len(calls) == 1  # reused
    lines = (data / "eval.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["fact_kind"] = "real_shuffled"
    (data / "eval.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    run_localize(cfg, spec, out, progress=False)
    assert len(calls) == 2


def test_a_localize_experiment_resumes_by_the_ledgers_rule(world, tmp_path, monkeypatch):
    """Issue 33, item 4: a localize experiment is a step of its folder's ledger: done is skipped
    (also when its folder has only the stamp of before the ledger), a changed input (the seed) or
    a damaged result is searched again."""
    from weightgraft.attribution.experiment import run_localize

    cfg, spec, _, calls = localize_world(world, tmp_path, monkeypatch)
    out = tmp_path / "run"
    folder = run_localize(cfg, spec, out, progress=False)
    ledger = folder / "provenance.json"
    inputs = json.loads(ledger.read_text())["steps"]["localize"]["inputs"]
    ledger.unlink()  # a search finished before the ledger: its stamp was settings.json
    (folder / "settings.json").write_text(json.dumps(inputs, indent=2) + "\n")
    run_localize(cfg, spec, out, progress=False)
    assert len(calls) == 1 and ledger.is_file() and not (folder / "settings.json").exists()
    run_localize(cfg.model_copy(update={"seed": cfg.seed + 1}), spec, out, progress=False)
    assert len(calls) == 2
    with (folder / "ranking.parquet").open("r+b") as damaged:
        damaged.write(b"XXXX")
    run_localize(cfg.model_copy(update={"seed": cfg.seed + 1}), spec, out, progress=False)
    assert len(calls) == 3


def test_a_localize_item_searched_again_is_then_reused_beside_the_records_of_its_folder(world, tmp_path, monkeypatch):
    """Issue 41: a run's subfolders hold records of weightgraft's files (`recorded.seal_tree`),
    rewritten as the run goes; a search must not count that record among its results, or each
    run would find the search changed and search again."""
    from weightgraft.folder_ownership import OWNED_RECORD
    from weightgraft.pipelines.run import run_all

    cfg, _, _, calls = localize_world(world, tmp_path, monkeypatch)
    out = tmp_path / "run"
    run_all(cfg, out, progress=False, report=False)
    assert (out / "localize" / "loc" / OWNED_RECORD).is_file()
    other = cfg.model_copy(update={"seed": cfg.seed + 1})
    run_all(other, out, progress=False, report=False)  # searched again, with the record present
    run_all(other, out, progress=False, report=False)
    assert len(calls) == 2
