"""Shipped pretrained weights: a build takes them only for the recipe they were made from, and
the folder it writes from them equals the one pretraining writes, byte for byte."""

from __future__ import annotations

from pathlib import Path

import torch

from training_fixtures import tiny_artifacts
from weightgraft.runtime import sha256_folder
from weightgraft.training import builtin, shipped
from weightgraft.training.pretrain import make_model, pack_documents, train_steps

SKIP = (builtin.TRAINING_RECORD,)


def _recipe(art) -> dict:
    steps = builtin.builtin_steps(builtin.SPECS[art.size], art, False, False)
    return next(s for s in steps if s.name == "pretrained model").recipe


def _ship_tiny(folder: Path) -> Path:
    art = tiny_artifacts()
    return shipped.write_shipped(art.pretrained, "tiny", _recipe(art), "not checked here", folder)


def test_a_build_from_shipped_weights_writes_the_pretrained_folder_byte_for_byte(tmp_path, monkeypatch):
    art = tiny_artifacts()
    monkeypatch.setattr(shipped, "SHIPPED", tmp_path / "ship")
    _ship_tiny(tmp_path / "ship")
    again = builtin.ensure_builtin("tiny", home=tmp_path / "home", progress=False, finetunes=False)
    assert sha256_folder(again.pretrained, skip=SKIP) == sha256_folder(art.pretrained, skip=SKIP)
    record = (again.pretrained / builtin.TRAINING_RECORD).read_text()
    assert "shipped: builtin-tiny-pretrained.safetensors" in record  # taken from the package, not pretrained


def test_shipped_weights_are_ignored_for_another_recipe_or_when_damaged(tmp_path):
    art = tiny_artifacts()
    weights = _ship_tiny(tmp_path)
    recipe = _recipe(art)
    assert shipped.find_shipped("tiny", recipe, tmp_path) == weights
    other = recipe | {"pretrain": recipe["pretrain"] | {"steps": recipe["pretrain"]["steps"] + 1}}
    assert shipped.find_shipped("tiny", other, tmp_path) is None
    assert shipped.find_shipped("default", recipe, tmp_path) is None  # nothing ships for it there
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert shipped.find_shipped("tiny", recipe, tmp_path) is None


def test_first_steps_digest_follows_the_weights():
    """The reproduction check's digest: the same run gives the same digest, one step more another."""
    spec = builtin.SPECS["tiny"]
    world = builtin.build_world(spec)
    tokenizer = builtin.pretraining_tokenizer(spec, world)
    blocks = pack_documents(builtin.pretraining_documents(spec, world), tokenizer, spec.pretrain.block_size)
    digests = []
    for steps in (2, 2, 3):
        model = make_model(spec.pretrain, tokenizer)
        train_steps(model, blocks, spec.pretrain, steps)
        digests.append(shipped.state_sha256(model))
    assert digests[0] == digests[1] != digests[2]
    assert builtin.first_steps_sha256(spec, steps=3) == digests[2]


def test_the_shipped_default_weights_are_what_the_recipe_makes():
    """The package's default weights (version 10 ships them): made from the current recipe,
    intact, and the recipe's first steps, pretrained here, reproduce the record's digest bit for
    bit (about 30 s: the default world's pretraining documents are generated and tokenized)."""
    record = shipped.read_record("default")
    assert record is not None and record["size"] == "default"
    art = builtin.builtin_artifacts("default", Path("/nonexistent"))
    assert shipped.find_shipped("default", _recipe(art)) is not None
    torch.manual_seed(1)  # the digest must not depend on the global generator
    assert builtin.first_steps_sha256(builtin.SPECS["default"], record["first_steps"]) == record["first_steps_sha256"]


def test_pretrain_ship_to_writes_the_pretrained_weights_and_their_record(tmp_path):
    """`weightgraft pretrain --ship-to`: the file is the pretrained folder's weights, byte for
    byte, and the record names this recipe and its first steps' digest (the tiny home's
    pretrained step is already built, so the command only ships it)."""
    from typer.testing import CliRunner

    from training_fixtures import tiny_home
    from weightgraft.cli import _register_all, app

    _register_all()
    art = tiny_artifacts()
    result = CliRunner().invoke(
        app, ["pretrain", "--size", "tiny", "--home", str(tiny_home()), "--ship-to", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    weights, _ = shipped.shipped_paths("tiny", tmp_path)
    assert weights.read_bytes() == (art.pretrained / shipped.WEIGHTS_FILE).read_bytes()
    record = shipped.read_record("tiny", tmp_path)
    assert record["recipe"] == _recipe(art) and record["first_steps"] == shipped.FIRST_STEPS
    assert record["first_steps_sha256"] == builtin.first_steps_sha256(builtin.SPECS["tiny"])
