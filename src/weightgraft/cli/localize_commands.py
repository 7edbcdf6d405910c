"""`weightgraft localize`: the smallest graft that carries a finetune's gain on a dataset.

The command parses its options and calls `pipelines.localize.localize_to_folder`, the flow a run
config's `localize` experiments share (`attribution.experiment.localize_pair`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import typer
from rich.console import Console

from weightgraft.attribution.experiment import ModelPair, SearchSettings
from weightgraft.cli import check_device_option, check_share
from weightgraft.pipelines.localize_command import LocalizeOutcome, builtin_pair, localize_to_folder


def localize_command(
    recipient: str | None = typer.Option(None, help="Recipient (pretrained) model: folder or cached hub id."),
    donor: str | None = typer.Option(None, help="Donor (finetuned) model: folder or cached hub id."),
    data: Path | None = typer.Option(None, help="A weightgraft dataset folder (eval.jsonl with role spans)."),
    builtin: Literal["default", "tiny"] | None = typer.Option(
        None,
        help="Use the built-in pretrained and relation models and relation data: default or tiny (built or reused).",
    ),
    home: str | None = typer.Option(None, help="Where built-in data and models are cached."),
    split: str = typer.Option("eval", help="Dataset split: eval or validation."),
    out: Path = typer.Option(Path("runs/localize"), "--out", help="Folder for results and pictures."),
    method: Literal["gradient", "integrated"] = typer.Option("gradient", help="Attribution: gradient or integrated."),
    steps: int = typer.Option(16, min=1, help="Path points of integrated attribution."),
    target: float = typer.Option(
        0.9, callback=check_share, help="Recovery of the SFT gain to reach (on every --stop-on metric)."
    ),
    stop_on: list[str] = typer.Option(
        ["top5", "prob"],
        "--stop-on",
        help="Metric whose recovery must reach --target: top5, prob (repeat the option for both; default both).",
    ),
    max_examples: int | None = typer.Option(
        None, min=1, help="Use at most this many prompts (seeded, templates in turn)."
    ),
    check_cells: int = typer.Option(
        0,
        min=0,
        help="On this many prompts, graft every FE and LT cell alone and "
        "report Spearman(attribution, exact effect) and the times; 0 skips.",
    ),
    batch_size: int = typer.Option(16, min=1, help="Prompts per attribution pass."),
    seed: int = typer.Option(0, help="Seed of the prompt choice and the random-order baseline."),
    device: str = typer.Option("cpu", callback=check_device_option, help="cpu, cuda, cuda:1, mps."),
    dtype: Literal["float32", "bfloat16", "float16"] = typer.Option("float32", help="float32, bfloat16 or float16."),
    progress: bool = typer.Option(True, help="Print progress."),
    trust_remote_code: bool = typer.Option(
        False, help="Allow model folders that ship their own Python code (auto_map) to run it (off by default)."
    ),
    allow_config_difference: list[str] = typer.Option(
        [],
        "--allow-config-difference",
        help="A config field the two models may differ in although it changes the computation, "
        "e.g. rope_theta (repeat the option for more; a run config's allow_config_differences).",
    ),
) -> None:
    """Rank (role x layer x component) cells by graft attribution, graft the top-k exactly, and
    stop at the smallest set that recovers the target share of the finetune's gain."""
    recipient, donor, data = builtin_pair(recipient, donor, data, builtin, home, progress)
    pair = ModelPair(
        recipient, donor, device, dtype, trust_remote_code, tuple(allow_config_difference), ("--recipient", "--donor")
    )
    settings = SearchSettings(method, steps, target, tuple(stop_on), batch_size, max_examples, check_cells, seed)
    _print_outcome(localize_to_folder(pair, data, split, settings, out, progress), method)


def _print_outcome(outcome: LocalizeOutcome, method: str) -> None:
    """The search in a few lines: baselines, the minimal set (or why none), where the files are."""
    console, result = Console(), outcome.result
    summary, base, written = result.summary(), result.baselines, outcome.written
    console.print(
        f"[bold]{len(result.examples)} prompts, {len(result.groups)} groups (role x layer x component), "
        f"{method} attribution[/bold] in {outcome.seconds:.1f} s"
    )
    console.print(
        f"PRE top-5 {base['PRE']['top5']:.3f} prob {base['PRE']['prob']:.3f}; SFT top-5 "
        f"{base['SFT']['top5']:.3f} prob {base['SFT']['prob']:.3f}; FE+LT-all recovers "
        f"{base['FE+LT']['recovery_top5']:.0%} (top-5), {base['FE+LT']['recovery_prob']:.0%} (prob) "
        f"with {result.counts['fe_lt_groups']} groups"
    )
    if result.reached:
        names = ", ".join(f"{r}/{'model' if layer is None else f'L{layer}'}/{c}" for r, layer, c in result.chosen)
        console.print(
            f"[green]minimal set: {len(result.chosen)} groups[/green] recovering "
            f"{summary.recovery['top5']:.0%} (top-5), {summary.recovery['prob']:.0%} (prob); "
            f"random order at that size: {summary.random_recovery_same_size['top5']:.0%}, "
            f"{summary.random_recovery_same_size['prob']:.0%}. Set: {names}"
        )
        console.print(
            f"cells per prompt: {result.counts['chosen_cells_per_prompt']:.1f} against "
            f"{result.counts['fe_lt_cells_per_prompt']:.1f} for FE+LT-all"
        )
    else:
        console.print(f"[yellow]{result.notes[0]}[/yellow]")
    if result.agreement:
        console.print(json.dumps(result.agreement, indent=1))
    console.print(
        f"results: {written['summary']}; pictures: {written['heatmaps']}, {written['recovery']}, "
        f"{written['positions']}, {written['tokens']}"
    )


def register(app: typer.Typer) -> None:
    app.command("localize")(localize_command)
