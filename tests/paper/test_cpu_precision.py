"""`--precision auto` on a CPU: bf16 only where the CPU has bf16 units and a step of the job's model
is measured at least MIN_SPEEDUP faster in it; the choice is kept for the job's whole life."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from training_fixtures import tiny_home
from weightgraft.paper import cpu_precision
from weightgraft.paper.cpu_precision import MIN_SPEEDUP, bf16_step_speedup, choose_cpu_precision
from weightgraft.paper.reproduce_job import ReproduceOptions, finetune_config, plan_job
from weightgraft.training.builtin import ensure_builtin


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_builtin("tiny", home=tiny_home(), progress=False, finetunes=False).pretrained


def _measured(value: float):
    calls = []

    def measure(folder, batch):
        calls.append((folder, batch))
        return value

    return measure, calls


@pytest.mark.parametrize(
    ("units", "speedup", "chosen"),
    [
        (True, MIN_SPEEDUP + 0.3, "bf16"),
        (True, MIN_SPEEDUP, "bf16"),
        (True, MIN_SPEEDUP - 0.01, "fp32"),
        (False, 3.0, "fp32"),
    ],
)
def test_bf16_is_taken_only_with_units_and_a_measured_gain(tmp_path, monkeypatch, units, speedup, chosen):
    monkeypatch.setattr(cpu_precision, "cpu_bf16_units", lambda: units)
    measure, calls = _measured(speedup)
    choice = choose_cpu_precision(tmp_path / "job", tmp_path, 16, measure)
    assert choice.precision == chosen
    assert calls == ([(tmp_path, 16)] if units else [])  # no units: nothing worth timing
    if units:
        assert choice.speedup == speedup and f"{speedup:.2f}x" in choice.reason
    else:
        assert "no bf16 units" in choice.reason


def test_without_the_model_on_disk_auto_stays_fp32(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_precision, "cpu_bf16_units", lambda: True)
    measure, calls = _measured(9.0)
    choice = choose_cpu_precision(tmp_path / "job", None, 16, measure)
    assert choice.precision == "fp32" and not calls and "not on disk" in choice.reason


@pytest.mark.parametrize("earlier", ["fp32", "bf16"])
def test_a_resumed_job_keeps_the_precision_it_began_with(tmp_path, monkeypatch, earlier):
    """A second timing could choose otherwise on a noisy machine, and every finetune's inputs would
    then differ from their records: done work redone. The folder's recipe decides instead."""
    monkeypatch.setattr(cpu_precision, "cpu_bf16_units", lambda: True)
    out = tmp_path / "job"
    out.mkdir()
    (out / "provenance.json").write_text(json.dumps({"recipe": {"precision": earlier}}))
    measure, calls = _measured(1.0 if earlier == "bf16" else 5.0)  # a timing that would choose otherwise
    choice = choose_cpu_precision(out, tmp_path, 16, measure)
    assert choice.precision == earlier and not calls and "as this job began" in choice.reason


def test_plan_job_finetunes_in_the_measured_precision_and_says_why(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setattr(cpu_precision, "cpu_bf16_units", lambda: True)
    monkeypatch.setattr(cpu_precision, "bf16_step_speedup", lambda folder, batch: 1.5)
    options = ReproduceOptions(model=str(tiny_model), out=tmp_path / "job", device="cpu", setting="laptop")
    job = plan_job(options)
    assert job.recipe.precision == "bf16" and finetune_config(job.recipe).precision == "bf16"
    assert job.recipe.record()["precision"] == "bf16"
    assert any("1.50x fp32's speed" in note for note in job.notes)
    explicit = plan_job(ReproduceOptions(**{**options.__dict__, "precision": "fp32"}))
    assert explicit.recipe.precision == "fp32"  # asked for: never measured over
    assert not any("--precision auto" in note for note in explicit.notes)


def test_the_speedup_is_timed_on_the_model(tiny_model):
    """A real timing of the tiny model's step in both precisions: a finite positive ratio."""
    speedup = bf16_step_speedup(tiny_model, 2, tokens=8)
    assert math.isfinite(speedup) and speedup > 0
