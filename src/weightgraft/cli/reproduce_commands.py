"""`weightgraft reproduce`: the paper's pipeline on one model (the job: weightgraft.paper.reproduce_job; its run: weightgraft.pipelines.reproduce)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer
from transformers.utils import logging as hf_logging

from weightgraft.cli import check_device_option, check_positive
from weightgraft.paper.estimate import PAPER_MODELS
from weightgraft.paper.reproduce_job import ReproduceOptions, plan_job
from weightgraft.paper.reproduce_plan import describe_plan
from weightgraft.pipelines.reproduce import reproduce
from weightgraft.training import GeneralLoss

DATASETS_HELP = (
    "Comma-separated paper dataset codes. FMRA = fake movies, real actors (fact kind "
    "fake_real; the paper's main set: every analysis); FMFA = fake movies, fake "
    "actors (fake_fake); RMRA-shuffled = real movies, shuffled real casts "
    "(real_shuffled, at most as many facts as weightgraft's real films). Sets after "
    "the first get their own SFT model and the position analysis."
)


def reproduce_command(
    model: str = typer.Option(
        ...,
        help="Pretrained model: a real model by name (smollm2-135m, gemma3-270m), a .gguf file, a local "
        "folder (safetensors) or a cached hub id. "
        f"Published numbers are shown for {', '.join(PAPER_MODELS)} (matched by name).",
    ),
    out: Path = typer.Option(..., "--out", help="Job folder; an existing one is resumed."),
    device: str = typer.Option("auto", callback=check_device_option, help="auto, cpu, cuda, cuda:N or mps."),
    dtype: Literal["float32", "bfloat16", "float16"] = typer.Option(
        "float32", help="dtype of the preset runs: float32, bfloat16 or float16."
    ),
    precision: Literal["auto", "fp32", "bf16", "fp16"] = typer.Option(
        "auto",
        help="Finetuning precision: auto (fp16 on a GPU as in the paper; on a CPU bf16 where a step of the "
        "model is measured at least 1.2x faster in it, else fp32), fp32, bf16 or fp16.",
    ),
    attention: Literal["auto", "sdpa", "eager"] = typer.Option(
        "auto",
        help="Attention kernel of the finetunes (the same attention, a speed choice): auto (on a CPU eager "
        "where a step of the model is measured at least 1.05x faster with it, else the model's default), "
        "sdpa or eager.",
    ),
    facts: int | None = typer.Option(
        None, help="Facts per dataset (default: the setting's; the paper and the aggressive setting: 1000)."
    ),
    epochs: int | None = typer.Option(
        None, min=1, help="Finetuning epochs (default: the setting's; the paper's is 10)."
    ),
    batch: int | None = typer.Option(
        None, min=1, help="Finetuning batch size (default: the setting's; the paper's is 4)."
    ),
    lr: float | None = typer.Option(
        None, callback=check_positive, help="Learning rate (default: the setting's: 2e-5 aggressive, 2e-6 gentle)."
    ),
    setting: Literal["aggressive", "gentle", "laptop"] = typer.Option(
        "aggressive",
        help="aggressive (the paper's main: lr 2e-5, weight "
        "decay 0.01, batch 4, 10 epochs, 1000 facts), gentle (lr 2e-6, no weight decay, general text "
        "mixed in: needs --general-text) or laptop (weightgraft's CPU scale: 40 facts, 3 epochs, "
        "batch 16, lr 3e-4, no layer sweeps; not the paper's, the report names each difference).",
    ),
    datasets: str = typer.Option("FMRA", help=DATASETS_HELP),
    general_text: Path | None = typer.Option(
        None, help='General text for --setting gentle: a JSONL of {"text": ...} or a dataset directory.'
    ),
    max_examples: int | None = typer.Option(
        None, min=1, help="Cap on the prompts scored per experiment (default: every prompt)."
    ),
    layer_sweeps: bool | None = typer.Option(
        None,
        "--layer-sweeps/--no-layer-sweeps",
        help="Run the layer sweeps (weightgraft's own analysis, not the paper's; most of a job's "
        "scored rows). Default: the setting's (off in laptop, on otherwise).",
    ),
    replay: bool = typer.Option(
        False,
        "--replay/--no-replay",
        help="Self-replay: mix the pretrained model's own continuations of weightgraft's neutral prompts (made "
        "once per job, offline) into every finetune as general text, at a share of 0.25 where the "
        "setting mixes in none (not the paper's; the report names it).",
    ),
    general_loss: GeneralLoss = typer.Option(
        "tokens",
        help="How general text (--replay, --general-text) is learned: tokens (cross-entropy on its "
        "tokens) or kl (the pretrained model's whole next-token distribution at each of its positions; "
        "not the paper's; the report names it).",
    ),
    lora_rank: int | None = typer.Option(
        None,
        min=0,
        help="Train a LoRA of this rank on every block linear instead of every weight, merged into "
        "each finetuned model (not the paper's; the report names it). Default: the setting's (0: full).",
    ),
    anchor: float | None = typer.Option(
        None,
        min=0.0,
        help="After each optimizer step pull every trained weight back towards the pretrained model's "
        "by lr x ANCHOR of its change (not the paper's; the report names it). Default: the setting's (0: off).",
    ),
    bootstrap: int = typer.Option(1000, min=1, help="Bootstrap resamples for the intervals."),
    seed: int = typer.Option(0),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan (steps, estimated steps, tokens and time) and stop."
    ),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """The paper's whole pipeline on MODEL: datasets, the four finetunes, every paper preset,
    and a report with a "paper vs this run" table per analysis. Resumable at every step (a done
    step is never redone, a killed finetune resumes from its last epoch's checkpoint). Under
    `torchrun` / `accelerate launch` the finetunes use every process; rank 0 runs the presets.
    \f
    Over 60 lines only by its option declarations (one typer.Option each); the body parses them
    and calls `plan_job` (once) and `reproduce`."""
    options = ReproduceOptions(
        model=model,
        out=out,
        device=device,
        dtype=dtype,
        precision=precision,
        attention=attention,
        facts=facts,
        epochs=epochs,
        batch_size=batch,
        lr=lr,
        setting=setting,
        datasets=tuple(c.strip() for c in datasets.split(",") if c.strip()),
        general_text=general_text,
        max_examples=max_examples,
        layer_sweeps=layer_sweeps,
        replay=replay,
        lora_rank=lora_rank,
        general_loss=general_loss,
        anchor=anchor,
        bootstrap=bootstrap,
        seed=seed,
    )
    if not progress:  # planning may convert a .gguf model, whose conversion shows transformers' bar
        hf_logging.disable_progress_bar()
    job = plan_job(options)  # ReproduceError (one line, exit 2) for options that cannot be planned
    if dry_run:
        typer.echo(describe_plan(job))
        return
    result = reproduce(job, progress=progress, echo=typer.echo)
    if result.report is not None:
        typer.echo(
            f"{len(result.computed)} steps computed, {len(result.reused)} reused in "
            f"{result.seconds:.1f} s; report: {result.report}"
        )


def register(app: typer.Typer) -> None:
    app.command("reproduce")(reproduce_command)
