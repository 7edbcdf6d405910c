"""`weightgraft reproduce --dry-run`: the plan for a paper model without any download, the
name match to the published models, and bad options refused with the fix named."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from weightgraft.cli import _register_all, app
from weightgraft.paper.estimate import paper_model_name


def _invoke(*args: str):
    _register_all()
    return CliRunner().invoke(app, ["reproduce", *args])


@pytest.mark.parametrize(
    "model, name",
    [
        ("gpt2-xl", "gpt2-xl"),
        ("openai-community/gpt2-xl", "gpt2-xl"),
        ("meta-llama/Llama-3.2-1B", "llama-3.2-1b"),
        ("google/gemma-1.1-2b", "gemma-1.1-2b-it"),
        ("google/gemma-1.1-2b-it", "gemma-1.1-2b-it"),
        ("/models/pythia-2.8b/", "pythia-2.8b"),
        ("gpt2", None),
        ("EleutherAI/pythia-2.8b-deduped", None),
    ],
)
def test_paper_models_are_matched_by_name(model, name):
    assert paper_model_name(model) == name


def test_dry_run_plans_gpt2_xl_from_its_known_size(tmp_path):
    out = tmp_path / "job"
    result = _invoke("--model", "gpt2-xl", "--out", str(out), "--device", "cuda", "--dry-run")
    assert result.exit_code == 0, result.output
    text = result.output
    assert "1.56 B parameters, 48 layers (known size (estimated))" in text
    assert "fp16" in text and "lr 2e-05" in text and "weight decay 0.01" in text
    # 1000 facts x 22 texts = 22000 texts; batch 4 -> 5500 steps per epoch, 10 epochs.
    sft = next(line for line in text.splitlines() if "finetune:FMRA_sft" in line)
    assert "55.0k" in sft and "22000 texts x 10 epochs" in sft
    half = next(line for line in text.splitlines() if "finetune:FMRA_task" in line)
    assert "27.5k" in half  # 500 facts
    for step in ("knowledge ", "run:FMRA ", "run:FMRA_hybrid", "report", "estimated total"):
        assert step in text
    assert not out.exists()  # a dry run writes nothing


def test_bad_options_name_the_fix(tmp_path):
    out = str(tmp_path / "job")
    cases = [
        (["--datasets", "FMRA,XYZ"], "unknown dataset code"),
        (["--facts", "2"], "at least 4"),
        (["--setting", "gentle"], "--general-text"),
        (["--setting", "wild"], "'wild' is not one of"),  # typer checks the Literal
        (["--device", "cpu", "--precision", "fp16"], "needs a CUDA GPU"),
    ]
    for extra, message in cases:
        result = _invoke("--model", "gpt2-xl", "--out", out, "--dry-run", *extra)
        assert result.exit_code == 2, (extra, result.output)
        assert message in result.output.replace("\n", " ").replace("│", ""), (extra, result.output)
