"""`weightgraft reproduce --replay` on the tiny built-in model: the self-replay texts are made once
per job as a ledger step, reused on resume, the same as made apart for the job's seed, mixed into
the finetune (its inputs hash them, its record counts them), and made again for a changed model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from training_fixtures import tiny_home
from weightgraft.cli import _register_all, app
from weightgraft.paper.neutral_prompts import NEUTRAL_PROMPTS
from weightgraft.paper.replay import replay_texts
from weightgraft.paper.reproduce_job import REPLAY_SAMPLES, ReproduceOptions, plan_job, replay_spec
from weightgraft.paper.reproduce_recipe import REPLAY_SHARE
from weightgraft.paper.reproduce_sections import deviations_section
from weightgraft.pipelines.reproduce import REPLAY_FILE, Pipeline
from weightgraft.runtime import sha256_json
from weightgraft.training.builtin import ensure_builtin

SFT = "FMRA_sft"


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_builtin("tiny", home=tiny_home(), progress=False, finetunes=False).pretrained


def _job(model: Path, out: Path, replay: bool = True):
    options = ReproduceOptions(
        model=str(model), out=out, device="cpu", setting="laptop", facts=4, epochs=1, lr=3e-3, replay=replay
    )
    return plan_job(options)


def _first_steps(job) -> Pipeline:
    """The job's datasets, replay and SFT finetune (the steps replay touches), as `run` does them."""
    pipeline = Pipeline(job, progress=False, echo=lambda line: None)
    pipeline.find_base_model()
    data = pipeline.step("datasets", pipeline.data_inputs(), pipeline.build_datasets)
    if job.recipe.replay:
        pipeline.make_replay()
    pipeline.run_finetune(job.finetunes[SFT], data)
    pipeline.ledger.save()
    return pipeline


@pytest.fixture(scope="module")
def replayed(tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "job"
    job = _job(tiny_model, out)
    first = _first_steps(job)
    again = _first_steps(_job(tiny_model, out))
    return job, first, again


def test_the_replay_texts_are_made_once_and_reused_on_resume(replayed):
    job, first, again = replayed
    assert first.ledger.session["computed"] == ["datasets", "replay", f"finetune:{SFT}"]
    assert again.ledger.session["computed"] == []
    assert again.ledger.session["reused"] == ["datasets", "replay", f"finetune:{SFT}"]
    record = again.ledger.record_of("replay")
    assert record["outputs"]["texts"] == len(NEUTRAL_PROMPTS) * REPLAY_SAMPLES
    assert record["paths"] == [REPLAY_FILE]


def test_the_replay_texts_are_the_models_own_for_the_jobs_seed(replayed, tiny_model):
    job, _, _ = replayed
    lines = (job.recipe.out / REPLAY_FILE).read_text().splitlines()
    written = [json.loads(line)["text"] for line in lines]
    assert written == replay_texts(str(tiny_model), NEUTRAL_PROMPTS, replay_spec(job.recipe))
    assert all(text.startswith(NEUTRAL_PROMPTS[i // REPLAY_SAMPLES]) for i, text in enumerate(written))


def test_the_finetune_mixes_them_in_and_records_them(replayed):
    job, first, _ = replayed
    texts = [json.loads(line)["text"] for line in (job.recipe.out / REPLAY_FILE).read_text().splitlines()]
    inputs = first.ledger.record_of(f"finetune:{SFT}")["inputs"]
    assert inputs["general_text"] == sha256_json(texts)
    assert inputs["config"]["mix_ratio"] == REPLAY_SHARE == 0.25
    record = json.loads((job.finetunes[SFT].out / "training_config.json").read_text())
    n_train = record["n_train_texts"]
    assert n_train == 4 * 22  # 4 facts, 11 sentences per direction
    assert record["n_general_texts"] == round(REPLAY_SHARE / (1 - REPLAY_SHARE) * n_train) == 29
    assert record["mix_ratio"] == 0.25


def test_the_report_names_replay_when_on_and_not_when_off(replayed, tiny_model, tmp_path):
    job, first, _ = replayed
    lines = deviations_section(job, first.ledger.body["steps"])
    replay_lines = [line for line in lines if line.startswith("- Self-replay")]
    assert len(replay_lines) == 1 and f"{len(NEUTRAL_PROMPTS) * REPLAY_SAMPLES} continuations" in replay_lines[0]
    off = _job(tiny_model, tmp_path / "off", replay=False)
    assert off.recipe.mix_ratio == 0.0 and not off.recipe.replay
    assert not [line for line in deviations_section(off, {}) if "replay" in line.lower()]


def _changed_copy(model: Path, folder: Path) -> Path:
    """The tiny model with one weight moved: another model to the ledger (another fingerprint)."""
    net = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    with torch.no_grad():
        net.get_input_embeddings().weight.mul_(1.5)
    net.save_pretrained(folder)
    AutoTokenizer.from_pretrained(model).save_pretrained(folder)
    return folder


def test_a_changed_model_makes_the_replay_texts_again(replayed, tiny_model, tmp_path):
    job, first, _ = replayed
    before = (job.recipe.out / REPLAY_FILE).read_text()
    changed = _job(_changed_copy(tiny_model, tmp_path / "changed"), job.recipe.out)
    pipeline = Pipeline(changed, progress=False, echo=lambda line: None)
    pipeline.find_base_model()
    pipeline.make_replay()
    assert pipeline.ledger.session["computed"] == ["replay"]
    assert pipeline.ledger.record_of("replay")["inputs"]["base_model"] != first.fingerprints["pre"]
    assert (job.recipe.out / REPLAY_FILE).read_text() != before


def test_the_cli_flag_reaches_the_recipe_and_the_plan(tiny_model, tmp_path):
    _register_all()
    args = ["reproduce", "--model", str(tiny_model), "--out", str(tmp_path / "j"), "--device", "cpu"]
    args += ["--setting", "laptop", "--facts", "4", "--dry-run"]
    plan = CliRunner().invoke(app, [*args, "--replay"])
    assert plan.exit_code == 0, plan.output
    assert " replay " in plan.output and "general text share 0.25 (self-replay)" in plan.output
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0, plain.output
    assert " replay " not in plain.output and "general text share 0;" in plain.output


def test_general_loss_kl_reaches_the_finetune_the_plan_and_the_report(tiny_model, tmp_path):
    """`--general-loss kl`: the SFT finetune records it, its ledger inputs differ from the token
    loss's (a resumed job does not reuse the other finetune), the plan names it and counts PRE's
    forward over the general rows, the report names it; without general text it is refused."""
    base = dict(model=str(tiny_model), device="cpu", setting="laptop", facts=4, epochs=1, lr=3e-3, replay=True)
    job = plan_job(ReproduceOptions(**base, out=tmp_path / "kl", general_loss="kl"))
    pipeline = _first_steps(job)
    record = json.loads((job.finetunes[SFT].out / "training_config.json").read_text())
    assert record["general_loss"] == "kl" and record["n_general_texts"] == 29
    inputs = pipeline.ledger.record_of(f"finetune:{SFT}")["inputs"]["config"]
    assert inputs["general_loss"] == "kl"
    assert "general_loss" not in _job(tiny_model, tmp_path / "tokens").recipe.record()
    lines = deviations_section(job, pipeline.ledger.body["steps"])
    assert len([line for line in lines if "KL from a frozen copy" in line]) == 1

    _register_all()
    args = ["reproduce", "--model", str(tiny_model), "--out", str(tmp_path / "j"), "--device", "cpu"]
    args += ["--setting", "laptop", "--facts", "4", "--dry-run", "--replay"]
    plan = CliRunner().invoke(app, [*args, "--general-loss", "kl"])
    assert plan.exit_code == 0, plan.output
    assert "general text share 0.25 (self-replay), learned by KL from PRE" in plan.output
    refused = CliRunner().invoke(app, [*args[:-1], "--general-loss", "kl"])
    assert refused.exit_code == 2 and "add --replay" in refused.output


def test_the_plan_counts_pres_forward_over_the_general_rows(tiny_model, tmp_path, monkeypatch):
    """With the KL loss, a finetune's plan adds one forward of PRE over the general quarter of
    every batch's rows at the batch's padded length (read off a plan whose step costs twice as much)."""
    from dataclasses import replace

    from weightgraft.paper import calibrate, reproduce_plan

    measured = calibrate.Measured(step_seconds=2.0, forward_token_seconds=0.01, batch=16, tokens=40, device="cpu")

    def sft_plan(loss: str, step_seconds: float):
        monkeypatch.setattr(reproduce_plan, "_measured", lambda *_: replace(measured, step_seconds=step_seconds))
        options = ReproduceOptions(
            model=str(tiny_model), out=tmp_path / loss, device="cpu", setting="laptop", facts=4, replay=True
        )
        steps, _ = reproduce_plan.plan_steps(plan_job(replace(options, general_loss=loss)))
        return next(s for s in steps if s.name == f"finetune:{SFT}")

    tokens, kl, dearer = sft_plan("tokens", 2.0), sft_plan("kl", 2.0), sft_plan("tokens", 4.0)
    padded = (dearer.seconds - tokens.seconds) * 40 / (2.0 * tokens.steps)  # the batches' padded length
    assert padded > 5
    assert kl.seconds - tokens.seconds == pytest.approx(tokens.steps * 16 * 0.25 * padded * 0.01)
