"""`weightgraft run CONFIG.yaml` and `weightgraft demo`: thin commands over `weightgraft.pipelines`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Literal

import typer
from rich.console import Console

from weightgraft.cli import DEVICE_HELP, DTYPE_HELP, Dtype
from weightgraft.experiments.config import load_config
from weightgraft.experiments.shards import parse_shard
from weightgraft.experiments.vocabulary import ModelRole
from weightgraft.pipelines.demo import run_demo
from weightgraft.pipelines.launch import launch_run, reports_here
from weightgraft.pipelines.run import merge_run


def _print_checks(checks) -> None:
    console = Console()
    if not checks:
        console.print("No verdict: the position or component experiments were not run.")
    for check in checks:
        colour = {"appears": "green", "does not appear": "red"}.get(check.outcome, "yellow")
        console.print(
            f"[bold]{check.name}[/bold]: [{colour}]{check.outcome}[/{colour}]. {check.sentence}", soft_wrap=True
        )


def run_command(
    config: Path = typer.Argument(
        ...,
        help="Run config (YAML): models, datasets, experiments (presets or conditions); format in weightgraft.experiments.config.",
    ),
    out: Path | None = typer.Option(None, "--out", help="Run folder (default runs/NAME); an existing one is resumed."),
    recipient: str | None = typer.Option(None, help="Model id or path for the `pre` key."),
    donor: str | None = typer.Option(None, help="Model id or path for the `sft` key."),
    task_model: str | None = typer.Option(None, help="Model id or path for the `task` key."),
    b2a_model: str | None = typer.Option(
        None, help="Model id or path for the `b2a` key (finetuned on the facts in B2A order only)."
    ),
    freetext_model: str | None = typer.Option(None, help="Model id or path for the `freetext` key."),
    device: str | None = typer.Option(None, help=DEVICE_HELP),
    dtype: Dtype | None = typer.Option(None, help=DTYPE_HELP),
    progress: bool = typer.Option(True, help="Show progress bars."),
    shard: str | None = typer.Option(
        None,
        help="I/N: run only shard I of N of the examples "
        "(e.g. a SLURM array task); `weightgraft merge` joins "
        "the shards. Under torchrun the rank sets it.",
    ),
    overwrite: bool = typer.Option(
        False, "--overwrite", help="Replace a run of another config in --out (its files are deleted)."
    ),
) -> None:
    """Run the experiments of a config file (resuming in an existing run folder) and report."""
    models = {
        k: v
        for k, v in (
            (ModelRole.PRE, recipient),
            (ModelRole.SFT, donor),
            (ModelRole.TASK, task_model),
            (ModelRole.B2A, b2a_model),
            (ModelRole.FREETEXT, freetext_model),
        )
        if v
    }
    cfg = load_config(config, device=device, dtype=dtype, models=models or None)
    out = out or Path("runs") / cfg.name
    start = time.perf_counter()
    part = parse_shard(shard) if shard is not None else None
    outcome = launch_run(cfg, out, shard=part, progress=progress, overwrite=overwrite)
    counts = f"{len(outcome.computed)} conditions computed, {len(outcome.reused)} reused in"
    if part is not None:
        typer.echo(
            f"shard {part[0]}/{part[1]}: {counts} {time.perf_counter() - start:.1f} s; "
            f"when every shard is done: weightgraft merge {out}"
        )
    elif reports_here():  # rank 0 merged and reports
        _print_checks(outcome.checks)
        typer.echo(
            f"{counts} {time.perf_counter() - start:.1f} s; report: {out / 'report.md'} and {out / 'report.html'}"
        )


def merge_command(
    run_dir: Path = typer.Argument(..., help="Run folder whose shards (--shard I/N) are all done."),
    report: bool = typer.Option(True, help="Write report.md and report.html as well."),
) -> None:
    """Join the shards of a run folder, then write its summary and report."""
    checks = merge_run(run_dir, report=report)
    _print_checks(checks)
    typer.echo(
        f"shards merged; summary: {run_dir / 'summary.csv'}" + (f"; report: {run_dir / 'report.md'}" if report else "")
    )


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run folder for the report."),
    size: Literal["default", "tiny"] = typer.Option("default", help="default, or tiny (the reduced demo CI runs)."),
    home: str | None = typer.Option(None, help="Where built-in data and models are cached."),
    recipient: str | None = typer.Option(None, help="Replace the built-in pretrained model."),
    donor: str | None = typer.Option(None, help="Replace the built-in relation model (SFT)."),
    task_model: str | None = typer.Option(None, help="Replace the built-in task model."),
    freetext_model: str | None = typer.Option(None, help="Replace the built-in model finetuned on articles."),
    b2a_model: str | None = typer.Option(None, help="Replace the built-in one-direction (B2A) model."),
    device: str = typer.Option("cpu", help=DEVICE_HELP),
    dtype: Dtype = typer.Option("float32", help=DTYPE_HELP),
    progress: bool = typer.Option(True, help="Show progress bars."),
    bootstrap: int = typer.Option(2000, min=0, help="Bootstrap resamples over facts for every interval (0: none)."),
    finer: bool = typer.Option(
        False, help="Also run the grafts finer than a component (O per head, rank curve, dose-response)."
    ),
) -> None:
    """Run the paper's analyses on the built-in models (built or reused) and report."""
    result = run_demo(
        out,
        size=size,
        home=home,
        progress=progress,
        recipient=recipient,
        donor=donor,
        task_model=task_model,
        freetext_model=freetext_model,
        b2a_model=b2a_model,
        device=device,
        dtype=dtype,
        bootstrap=bootstrap,
        finer=finer,
    )
    _print_checks(result.checks)
    typer.echo(
        f"built-in models ready in {result.build_seconds:.1f} s; experiments and report "
        f"in {result.run_seconds:.1f} s; report: {result.out / 'report.md'} and "
        f"{result.out / 'report.html'}"
    )


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("merge")(merge_command)
    app.command("demo")(demo_command)
