"""The anchor (`FinetuneConfig.anchor`): each optimizer step pulls trained weights towards their start."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from training_fixtures import tiny_artifacts
from weightgraft.training.anchor import AnchorToStart
from weightgraft.training.finetune import FinetuneConfig, finetune


def test_one_step_pulls_each_trained_weight_by_lr_times_strength_of_its_change():
    """w <- w - lr * A * (w - w0), written out in float64 per tensor; a frozen weight is not touched,
    and a reference model's weight of the same name is the start when one is given."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    model[1].bias.requires_grad_(False)
    reference = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    anchor = AnchorToStart(model, strength=7.0, reference=reference)
    with torch.no_grad():
        for weight in model.parameters():
            weight.add_(torch.randn_like(weight))
    before = {n: w.detach().double().clone() for n, w in model.named_parameters()}
    starts = {n: w.detach().double() for n, w in reference.named_parameters()}
    optimizer = SimpleNamespace(param_groups=[{"lr": 0.01}])
    anchor.on_optimizer_step(None, None, None, optimizer=optimizer)
    for name, weight in model.named_parameters():
        if name == "1.bias":
            expected = before[name]
        else:
            expected = before[name] - 0.01 * 7.0 * (before[name] - starts[name])
        torch.testing.assert_close(weight.detach().double(), expected, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="strength must be > 0"):
        AnchorToStart(model, strength=0.0)


def _change(before: dict, after: dict) -> float:
    return sum(float((after[n] - before[n]).double().norm() ** 2) for n in before) ** 0.5


def test_an_anchored_finetune_moves_the_weights_less_and_records_the_anchor(tmp_path):
    """The same finetune (data, seed, rate) with a strong anchor ends nearer the pretrained model."""
    art = tiny_artifacts()
    common = {"epochs": 1, "lr": 5e-3, "mix_ratio": 0.0, "device": "cpu"}
    free = finetune(art.pretrained, art.relation_data, tmp_path / "free", FinetuneConfig(**common), progress=False)
    anchored = finetune(
        art.pretrained, art.relation_data, tmp_path / "anchored", FinetuneConfig(**common, anchor=40.0), progress=False
    )
    before = load_file(art.pretrained / "model.safetensors")
    free_change = _change(before, load_file(free.path / "model.safetensors"))
    anchored_change = _change(before, load_file(anchored.path / "model.safetensors"))
    assert 0 < anchored_change < 0.8 * free_change
    assert json.loads((anchored.path / "training_config.json").read_text())["anchor"] == 40.0
    assert "anchor" not in json.loads((free.path / "training_config.json").read_text())
    for bad in (FinetuneConfig(anchor=-1.0, mix_ratio=0.0), FinetuneConfig(anchor=1.0, lora_rank=2, mix_ratio=0.0)):
        with pytest.raises(Exception, match="anchor must be 0"):
            finetune(art.pretrained, art.relation_data, tmp_path / "bad", bad, progress=False)
