"""`weightgraft run CONFIG.yaml` and `weightgraft demo`: thin commands over `weightgraft.pipelines`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

DEVICE_HELP = "Device for every model: cpu, cuda, cuda:1, mps."
DTYPE_HELP = "float32, bfloat16 or float16."


def _print_checks(checks) -> None:
    from rich.console import Console

    console = Console()
    if not checks:
        console.print("No verdict: the position or component experiments were not run.")
    for check in checks:
        colour = {"appears": "green", "does not appear": "red"}.get(check.outcome, "yellow")
        console.print(f"[bold]{check.name}[/bold]: [{colour}]{check.outcome}[/{colour}]. "
                      f"{check.sentence}", soft_wrap=True)


def run_command(
    config: Path = typer.Argument(..., help="Run config (YAML): models, datasets, experiments (presets or conditions); format in weightgraft.experiments.config."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default runs/NAME); "
                                       "an existing one is resumed."),
    recipient: Optional[str] = typer.Option(None, help="Model id or path for the `pre` key."),
    donor: Optional[str] = typer.Option(None, help="Model id or path for the `sft` key."),
    task_model: Optional[str] = typer.Option(None, help="Model id or path for the `task` key."),
    b2a_model: Optional[str] = typer.Option(None, help="Model id or path for the `b2a` key "
                                            "(finetuned on the facts in B2A order only)."),
    freetext_model: Optional[str] = typer.Option(None, help="Model id or path for the `freetext` key."),
    device: Optional[str] = typer.Option(None, help=DEVICE_HELP),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Run the experiments of a config file (resuming in an existing run folder) and report."""
    from weightgraft.experiments.config import ConfigError, load_config
    from weightgraft.pipelines import run_all

    models = {k: v for k, v in (("pre", recipient), ("sft", donor), ("task", task_model),
                                ("b2a", b2a_model), ("freetext", freetext_model)) if v}
    try:
        cfg = load_config(config, device=device, dtype=dtype, models=models or None)
    except ConfigError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None
    out = out or Path("runs") / cfg.name
    start = time.perf_counter()
    outcome = run_all(cfg, out, progress=progress)
    _print_checks(outcome.checks)
    typer.echo(f"{len(outcome.computed)} conditions computed, {len(outcome.reused)} reused in "
               f"{time.perf_counter() - start:.1f} s; report: {out / 'report.md'} "
               f"and {out / 'report.html'}")


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run folder for the report."),
    size: str = typer.Option("default", help="default, or tiny (the reduced demo CI runs)."),
    home: Optional[str] = typer.Option(None, help="Where built-in data and models are cached."),
    recipient: Optional[str] = typer.Option(None, help="Replace the built-in pretrained model."),
    donor: Optional[str] = typer.Option(None, help="Replace the built-in relation model (SFT)."),
    task_model: Optional[str] = typer.Option(None, help="Replace the built-in task model."),
    freetext_model: Optional[str] = typer.Option(None, help="Replace the built-in model "
                                                 "finetuned on articles."),
    b2a_model: Optional[str] = typer.Option(None, help="Replace the built-in one-direction "
                                            "(B2A) model."),
    device: str = typer.Option("cpu", help=DEVICE_HELP),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    progress: bool = typer.Option(True, help="Show progress bars."),
    bootstrap: int = typer.Option(2000, min=0, help="Bootstrap resamples over facts for every "
                                  "interval (0: none)."),
) -> None:
    """Run the paper's analyses on the built-in models (built or reused) and report."""
    from weightgraft.pipelines.demo import run_demo

    result = run_demo(out, size=size, home=home, progress=progress, recipient=recipient,
                      donor=donor, task_model=task_model, freetext_model=freetext_model,
                      b2a_model=b2a_model, device=device, dtype=dtype, bootstrap=bootstrap)
    for note in result.notes:
        typer.echo(f"note: {note}")
    _print_checks(result.checks)
    typer.echo(f"built-in models ready in {result.build_seconds:.1f} s; experiments and report "
               f"in {result.run_seconds:.1f} s; report: {result.out / 'report.md'} and "
               f"{result.out / 'report.html'}")


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("demo")(demo_command)
