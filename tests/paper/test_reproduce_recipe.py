"""Issue 42: a reproduce job's options are resolved once into a frozen `Recipe` that every later
step reads, and the job is planned once per command."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from weightgraft.paper import reproduce_job
from weightgraft.paper.reproduce_job import ReproduceOptions, finetune_config, plan_job
from weightgraft.paper.reproduce_recipe import DEFAULT_MAX_LENGTH, PAPER_SETTING, SETTINGS, resolve_recipe


def test_open_options_take_the_settings_values_and_given_ones_stay(tmp_path):
    laptop = resolve_recipe(
        ReproduceOptions(model="m", out=tmp_path / "j", device="cpu", setting="laptop"), SETTINGS["laptop"]
    )
    assert (laptop.facts, laptop.epochs, laptop.batch_size, laptop.lr) == (40, 3, 16, 3e-4)
    assert laptop.layer_sweeps is False and laptop.group_by_length is True
    given = ReproduceOptions(
        model="m",
        out=tmp_path / "j",
        device="cpu",
        setting="laptop",
        facts=8,
        epochs=1,
        batch_size=2,
        lr=1e-3,
        layer_sweeps=True,
    )
    recipe = resolve_recipe(given, SETTINGS["laptop"])
    assert (recipe.facts, recipe.epochs, recipe.batch_size, recipe.lr, recipe.layer_sweeps) == (8, 1, 2, 1e-3, True)
    paper = resolve_recipe(ReproduceOptions(model="gpt2-xl", out=tmp_path / "j", device="cpu"), PAPER_SETTING)
    assert (paper.facts, paper.epochs, paper.batch_size, paper.lr, paper.weight_decay) == (1000, 10, 4, 2e-5, 0.01)
    assert paper.precision == "fp32" and paper.max_length == 512


def test_the_recipe_is_frozen_absolute_and_feeds_the_finetune_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = plan_job(
        ReproduceOptions(
            model="pythia-2.8b", out=Path("rel") / "job", device="cpu", setting="gentle", general_text=Path("g.jsonl")
        )
    )
    recipe = job.recipe
    assert recipe.out == (tmp_path / "rel" / "job").resolve() and recipe.max_length == 2048
    assert recipe.max_length != DEFAULT_MAX_LENGTH  # the paper's Pythia length, not the default
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.lr = 1.0  # type: ignore[misc]
    config = finetune_config(recipe)
    assert (config.lr, config.weight_decay, config.mix_ratio, config.max_length) == (2e-6, 0.0, 0.5, 2048)
    assert job.runs["FMRA"].out == recipe.out / "runs" / "FMRA"


def test_the_reproduce_command_plans_its_job_once(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from typer.testing import CliRunner

    from weightgraft.cli import _register_all, app, reproduce_commands

    calls = []

    def counted(options):
        calls.append(options)
        return plan_job(options)

    monkeypatch.setattr(reproduce_commands, "plan_job", counted)
    monkeypatch.setattr(
        reproduce_commands, "reproduce", lambda job, **kw: calls.append(job.recipe) or SimpleNamespace(report=None)
    )
    monkeypatch.setattr(reproduce_job, "_check_tokenizer", lambda model: None)
    _register_all()
    result = CliRunner().invoke(
        app, ["reproduce", "--model", "gpt2-xl", "--out", str(tmp_path / "j"), "--device", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert len(calls) == 2 and calls[1] == plan_job(calls[0]).recipe  # planned once, run on that job


def test_a_lora_rank_reaches_the_finetunes_plan_and_deviations_and_a_full_finetune_records_none(tmp_path):
    """--lora-rank N: the finetune config trains a LoRA of rank N and the report names it; a job
    without it records the recipe and finetune inputs as before the option (no lora_rank key),
    so that finished steps of older jobs are still found done."""
    from weightgraft.paper.reproduce_sections import deviations_section

    lora = plan_job(ReproduceOptions(model="m", out=tmp_path / "l", device="cpu", setting="laptop", lora_rank=8))
    assert lora.recipe.lora_rank == 8 and finetune_config(lora.recipe).lora_rank == 8
    assert lora.recipe.record()["lora_rank"] == 8 and finetune_config(lora.recipe).record()["lora_rank"] == 8
    assert any("LoRA finetunes: adapters of rank 8" in line for line in deviations_section(lora, {}))
    full = plan_job(ReproduceOptions(model="m", out=tmp_path / "f", device="cpu", setting="laptop"))
    assert full.recipe.lora_rank == 0
    assert "lora_rank" not in full.recipe.record() and "lora_rank" not in finetune_config(full.recipe).record()
    assert not any("LoRA" in line for line in deviations_section(full, {}))


def test_an_anchor_reaches_the_finetunes_plan_and_deviations_and_an_unanchored_job_records_none(tmp_path):
    """--anchor A: the finetune config pulls towards PRE by A and the report names it; a job without
    it records the recipe and finetune inputs as before the option (no anchor key)."""
    from weightgraft.paper.reproduce_sections import deviations_section

    held = plan_job(ReproduceOptions(model="m", out=tmp_path / "a", device="cpu", setting="laptop", anchor=20.0))
    assert held.recipe.anchor == 20.0 and finetune_config(held.recipe).anchor == 20.0
    assert held.recipe.record()["anchor"] == 20.0 and finetune_config(held.recipe).record()["anchor"] == 20.0
    assert any("pulled back towards the pretrained model's by lr x 20" in line for line in deviations_section(held, {}))
    free = plan_job(ReproduceOptions(model="m", out=tmp_path / "f", device="cpu", setting="laptop"))
    assert free.recipe.anchor == 0.0
    assert "anchor" not in free.recipe.record() and "anchor" not in finetune_config(free.recipe).record()
    assert not any("Anchored" in line for line in deviations_section(free, {}))
