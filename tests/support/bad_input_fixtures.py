"""A small world of bad inputs for the one-line-error tests: tiny models (a Llama pair, a GPT-2
pair with a 4-token context, a folder without tokenizer, a checkpoint that lacks a tensor), the
tiny world's dataset folder and a dataset built by `weightgraft data`'s own code."""

from __future__ import annotations

import errno
import importlib
import json
import pkgutil
import shutil
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file, save_file

from exp_fixtures import build_models
from tiny_world import build_tokenizer, write_dataset

EXPERIMENT = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE"]}


def build_world(root: Path) -> dict[str, Path]:
    from transformers import GPT2Config, GPT2LMHeadModel

    from data_fixtures import small_facts
    from weightgraft.data.build import build_dataset

    models = {k: Path(v) for k, v in build_models(root / "models", layers=2).items()}
    tokenizer = build_tokenizer()
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=4, n_embd=16, n_layer=2, n_head=2)
    for name in ("gpt2_pre", "gpt2_sft"):
        GPT2LMHeadModel(config).save_pretrained(root / "models" / name)
        tokenizer.save_pretrained(root / "models" / name)
        models[name] = root / "models" / name
    no_tokenizer = root / "models" / "no_tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        if (models["pre"] / name).exists():
            shutil.copy(models["pre"] / name, no_tokenizer / name)
    models["no_tokenizer"] = no_tokenizer
    lacking = root / "models" / "lacking"
    shutil.copytree(models["pre"], lacking)
    weights = load_file(lacking / "model.safetensors")
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, lacking / "model.safetensors", metadata={"format": "pt"})
    models["lacking"] = lacking
    _, facts = small_facts()
    dataset = build_dataset(root / "built", facts[:6], seed=0, texts_per_fact=4)
    return {**models, "data": Path(write_dataset(root / "data")), "built": Path(dataset), "root": root}


def config_body(world, **changes) -> dict:
    """A small valid run config over the world's models and dataset, with `changes` applied."""
    body = {
        "name": "t",
        "bootstrap": 10,
        "models": {"pre": str(world["pre"]), "sft": str(world["sft"])},
        "datasets": {"relation": str(world["data"])},
        "experiments": [EXPERIMENT],
    }
    body.update(changes)
    return body


def write_config(path: Path, world: dict[str, Path], **changes) -> Path:
    path.write_text(yaml.safe_dump(config_body(world, **changes)))
    return path


def edited_dataset(world: dict[str, Path], folder: Path, edit) -> Path:
    """A copy of the tiny world's dataset whose first eval.jsonl record went through `edit`."""
    shutil.copytree(world["data"], folder)
    lines = (folder / "eval.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    edit(record)
    lines[0] = json.dumps(record)
    (folder / "eval.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def fill_the_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every atomic write fails with ENOSPC until the test ends. Every weightgraft module is imported
    first: a module imported while the patch is on would bind the failing writer through its
    `from weightgraft.atomic import write_atomic` and keep it after the patch is undone, filling
    the disk for every later test."""
    import weightgraft
    import weightgraft.atomic

    for module in pkgutil.walk_packages(weightgraft.__path__, "weightgraft."):
        importlib.import_module(module.name)

    def full(path, writer):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(weightgraft.atomic, "write_atomic", full)
