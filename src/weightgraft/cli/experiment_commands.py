"""`weightgraft run CONFIG.yaml` and `weightgraft demo`."""

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
                      f"{check.sentence}")


def run_command(
    config: Path = typer.Argument(..., help="Run config (YAML): models, datasets, experiments (presets or conditions); format in weightgraft.experiments.config."),
    out: Optional[Path] = typer.Option(None, "--out", help="Run folder (default runs/NAME); "
                                       "an existing one is resumed."),
    recipient: Optional[str] = typer.Option(None, help="Model id or path for the `pre` key."),
    donor: Optional[str] = typer.Option(None, help="Model id or path for the `sft` key."),
    task_model: Optional[str] = typer.Option(None, help="Model id or path for the `task` key."),
    device: Optional[str] = typer.Option(None, help=DEVICE_HELP),
    dtype: Optional[str] = typer.Option(None, help=DTYPE_HELP),
    progress: bool = typer.Option(True, help="Show progress bars."),
) -> None:
    """Run the experiments of a config file (resuming in an existing run folder) and report."""
    from weightgraft.experiments.config import ConfigError, load_config
    from weightgraft.experiments.runner import run_experiments

    models = {k: v for k, v in (("pre", recipient), ("sft", donor), ("task", task_model)) if v}
    try:
        cfg = load_config(config, device=device, dtype=dtype, models=models or None)
    except ConfigError as err:
        typer.echo(str(err), err=True)
        raise typer.Exit(2) from None
    out = out or Path("runs") / cfg.name
    start = time.perf_counter()
    result = run_experiments(cfg, out, progress=progress)
    from weightgraft.reporting.verdict import check_pattern
    from weightgraft.reporting.summary import read_recovery, read_summary

    _print_checks(check_pattern(read_summary(out), read_recovery(out)))
    typer.echo(f"{len(result.computed)} conditions computed, {len(result.reused)} reused in "
               f"{time.perf_counter() - start:.1f} s; report: {out / 'report.md'} "
               f"and {out / 'report.html'}")


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", help="Run folder for the report."),
    size: str = typer.Option("default", help="default, or tiny (the reduced demo CI runs)."),
    home: Optional[str] = typer.Option(None, help="Where built-in data and models are cached."),
    recipient: Optional[str] = typer.Option(None, help="Replace the built-in pretrained model."),
    donor: Optional[str] = typer.Option(None, help="Replace the built-in relation model."),
    task_model: Optional[str] = typer.Option(None, help="Replace the built-in task model."),
    device: str = typer.Option("cpu", help=DEVICE_HELP),
    dtype: str = typer.Option("float32", help=DTYPE_HELP),
    progress: bool = typer.Option(True, help="Show progress bars."),
    bootstrap: int = typer.Option(2000, min=0, help="Bootstrap resamples over facts for every "
                                  "interval (0: none)."),
) -> None:
    """Run the paper's five analyses on the built-in models (built or reused) and report."""
    from weightgraft.experiments.demo import run_demo

    result = run_demo(out, size=size, home=home, progress=progress, recipient=recipient,
                      donor=donor, task_model=task_model, device=device, dtype=dtype,
                      bootstrap=bootstrap)
    _print_checks(result.checks)
    typer.echo(f"built-in models ready in {result.build_seconds:.1f} s; experiments and report "
               f"in {result.run_seconds:.1f} s; report: {result.out / 'report.md'} and "
               f"{result.out / 'report.html'}")


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("demo")(demo_command)
