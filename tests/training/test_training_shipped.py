"""Shipped pretrained weights: a build takes them only for the recipe they were made from, the
folder it writes from them equals the one pretraining writes, byte for byte, and the recipe still
makes them (within a stated tolerance, on any CPU)."""

from __future__ import annotations

from pathlib import Path

import torch

from training_fixtures import tiny_artifacts
from weightgraft.folder_ownership import OWNED_RECORD
from weightgraft.runtime import sha256_folder
from weightgraft.training import builtin, builtin_specs, shipped
from weightgraft.training.pretrain import make_model, pack_documents, train_steps

# The training record says where the weights came from (shipped or pretrained here), and the
# folder's ownership record lists every file with its hash, that record's too: both differ by design.
SKIP = (builtin.TRAINING_RECORD, OWNED_RECORD)


def _recipe(art) -> dict:
    steps = builtin.builtin_steps(builtin_specs.SPECS[art.size], art, False, False)
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
    spec = builtin_specs.SPECS["tiny"]
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
    intact, and the recipe's first steps, pretrained here, land within `PROBE_TOLERANCE` of the
    recorded model after those steps, on any CPU (bit for bit only on the machine that made them:
    another sums in another order), while one step more lands outside it, so the check can fail
    (about 100 s: the default world's pretraining documents are generated and tokenized, and two
    short trainings run)."""
    record = shipped.read_record("default")
    assert record is not None and record["size"] == "default"
    art = builtin.builtin_artifacts("default", Path("/nonexistent"))
    assert shipped.find_shipped("default", _recipe(art)) is not None
    torch.manual_seed(1)  # the models must not depend on the global generator
    steps = record["first_steps"]
    remade, one_more = builtin.first_steps_models(builtin_specs.SPECS["default"], [steps, steps + 1])
    reference = record["first_steps_probe"]
    assert shipped.probe_distance(shipped.state_probe(remade), reference) <= shipped.PROBE_TOLERANCE
    assert shipped.probe_distance(shipped.state_probe(one_more), reference) > 5 * shipped.PROBE_TOLERANCE


def test_a_probe_tells_models_apart_by_their_distance():
    """The probe's distance estimates the true relative L2 distance of two states (within 30%
    here), is 0 for one state, and infinite for states of different tensors."""
    base = torch.nn.Linear(64, 64)
    moved = torch.nn.Linear(64, 64)
    moved.load_state_dict(base.state_dict())
    with torch.no_grad():
        moved.weight.add_(1e-3 * torch.randn(64, 64, generator=torch.Generator().manual_seed(0)))
    reference = shipped.state_probe(base)
    true = float(
        torch.sqrt(sum(((moved.state_dict()[k] - v) ** 2).sum() for k, v in base.state_dict().items()))
        / torch.sqrt(sum((v**2).sum() for v in base.state_dict().values()))
    )
    assert shipped.probe_distance(reference, reference) == 0
    assert 0.7 * true < shipped.probe_distance(shipped.state_probe(moved), reference) < 1.3 * true
    other = torch.nn.Sequential(torch.nn.Linear(64, 64))  # other tensor names: "0.weight", "0.bias"
    assert shipped.probe_distance(shipped.state_probe(other), reference) == float("inf")


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
    (first,) = builtin.first_steps_models(builtin_specs.SPECS["tiny"])
    assert record["first_steps_sha256"] == shipped.state_sha256(first)
    assert shipped.probe_distance(shipped.state_probe(first), record["first_steps_probe"]) == 0
