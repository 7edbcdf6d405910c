"""`--attention auto` on a CPU: eager only where a step of the job's model is measured at least
MIN_SPEEDUP faster with it; the choice is kept for the job's whole life, and a job begun before
the choice existed keeps the model's default kernel."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from training_fixtures import tiny_home
from weightgraft.paper import cpu_attention
from weightgraft.paper.cpu_attention import MIN_SPEEDUP, choose_cpu_attention, eager_step_speedup
from weightgraft.paper.reproduce_job import ReproduceOptions, finetune_config, plan_job
from weightgraft.paper.reproduce_recipe import Recipe
from weightgraft.training.builtin import ensure_builtin


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_builtin("tiny", home=tiny_home(), progress=False, finetunes=False).pretrained


def _measured(value: float):
    calls = []

    def measure(folder, batch, precision):
        calls.append((folder, batch, precision))
        return value

    return measure, calls


@pytest.mark.parametrize(
    ("speedup", "chosen"),
    [(MIN_SPEEDUP + 0.2, "eager"), (MIN_SPEEDUP, "eager"), (MIN_SPEEDUP - 0.01, None), (0.8, None)],
)
def test_eager_is_taken_only_with_a_measured_gain(tmp_path, speedup, chosen):
    measure, calls = _measured(speedup)
    choice = choose_cpu_attention(tmp_path / "job", tmp_path, 16, "bf16", measure)
    assert choice.kernel == chosen
    assert calls == [(tmp_path, 16, "bf16")]  # timed in the job's own precision
    assert choice.speedup == speedup and f"{speedup:.2f}x" in choice.reason


def test_without_the_model_on_disk_auto_keeps_the_default(tmp_path):
    measure, calls = _measured(9.0)
    choice = choose_cpu_attention(tmp_path / "job", None, 16, "fp32", measure)
    assert choice.kernel is None and not calls and "not on disk" in choice.reason


@pytest.mark.parametrize("earlier", ["sdpa", "eager", None])
def test_a_resumed_job_keeps_the_kernel_it_began_with(tmp_path, earlier):
    """A second timing could choose otherwise, and every finetune's inputs would then differ from
    their records: done work redone. A job recorded before the choice existed (no key) keeps the
    default, which is what it trained with."""
    out = tmp_path / "job"
    out.mkdir()
    recipe = {"precision": "fp32"} | ({"attention": earlier} if earlier else {})
    (out / "provenance.json").write_text(json.dumps({"recipe": recipe}))
    measure, calls = _measured(1.0 if earlier == "eager" else 5.0)  # a timing that would choose otherwise
    choice = choose_cpu_attention(out, tmp_path, 16, "fp32", measure)
    assert choice.kernel == earlier and not calls and "as this job began" in choice.reason


def test_a_kernel_the_architecture_lacks_keeps_the_default(tmp_path):
    def refuse(folder, batch, precision):
        raise ValueError("does not support an attention implementation through torch's sdpa")

    choice = choose_cpu_attention(tmp_path / "job", tmp_path, 16, "fp32", refuse)
    assert choice.kernel is None and "could not be timed" in choice.reason


def test_plan_job_finetunes_with_the_measured_kernel_and_says_why(tmp_path, monkeypatch, tiny_model):
    monkeypatch.setattr(cpu_attention, "eager_step_speedup", lambda folder, batch, precision: 1.3)
    options = ReproduceOptions(model=str(tiny_model), out=tmp_path / "job", device="cpu", setting="laptop")
    job = plan_job(options)
    assert job.recipe.attention == "eager" and finetune_config(job.recipe).attention == "eager"
    assert job.recipe.record()["attention"] == "eager"
    assert any("1.30x sdpa's speed" in note for note in job.notes)
    explicit = plan_job(ReproduceOptions(**{**options.__dict__, "attention": "sdpa"}))
    assert explicit.recipe.attention == "sdpa"  # asked for: never measured over
    assert not any("--attention auto" in note for note in explicit.notes)
    monkeypatch.setattr(cpu_attention, "eager_step_speedup", lambda folder, batch, precision: 1.0)
    default = plan_job(ReproduceOptions(**{**options.__dict__, "out": tmp_path / "other"}))
    assert default.recipe.attention is None and finetune_config(default.recipe).attention is None


def test_records_made_before_the_choice_existed_still_match():
    """attention None (the default kernel) is left out of the recipe's and the finetune's
    records, so that the input hashes of jobs made before it stay the same."""
    fields = {name: None for name in Recipe.__dataclass_fields__}
    recipe = Recipe(**{**fields, "out": Path("/x"), "lora_rank": 0, "general_loss": "tokens", "attention": None})
    assert "attention" not in recipe.record()
    assert "attention" not in finetune_config(recipe).record()
    eager = Recipe(**{**fields, "out": Path("/x"), "lora_rank": 0, "general_loss": "tokens", "attention": "eager"})
    assert eager.record()["attention"] == "eager" and finetune_config(eager).record()["attention"] == "eager"


def test_the_speedup_is_timed_on_the_model(tiny_model):
    """A real timing of the tiny model's step with both kernels: a finite positive ratio."""
    speedup = eager_step_speedup(tiny_model, 4, "fp32", tokens=8)
    assert math.isfinite(speedup) and speedup > 0


def test_the_report_names_eager_attention_only_where_a_finetune_trained_with_it(tmp_path):
    from weightgraft.paper.reproduce_sections import deviations_section

    job = plan_job(ReproduceOptions(model="m", out=tmp_path / "job", device="cpu", setting="laptop", attention="sdpa"))

    def steps(attention):
        config = {"precision": "bf16"} | ({"attention": attention} if attention else {})
        return {"finetune:FMRA_sft": {"inputs": {"config": config}}, "datasets": {"inputs": {}}}

    assert any("eager kernel" in line for line in deviations_section(job, steps("eager")))
    assert not any("eager" in line for line in deviations_section(job, steps(None)))
    assert not any("eager" in line for line in deviations_section(job, steps("sdpa")))
