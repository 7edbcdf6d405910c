"""`weightgraft localize`: the smallest graft that carries a finetune's gain on a dataset."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from weightgraft.cli import check_device, check_share


def localize_command(
    ctx: typer.Context,
    recipient: str | None = typer.Option(None, help="Recipient (pretrained) model: folder or cached hub id."),
    donor: str | None = typer.Option(None, help="Donor (finetuned) model: folder or cached hub id."),
    data: Path | None = typer.Option(None, help="A weightgraft dataset folder (eval.jsonl with role spans)."),
    builtin: str | None = typer.Option(
        None,
        help="Use the built-in pretrained and relation models and relation data: default or tiny (built or reused).",
    ),
    home: str | None = typer.Option(None, help="Where built-in data and models are cached."),
    split: str = typer.Option("eval", help="Dataset split: eval or validation."),
    out: Path = typer.Option(Path("runs/localize"), "--out", help="Folder for results and pictures."),
    method: str = typer.Option("gradient", help="Attribution: gradient or integrated."),
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
    device: str = typer.Option("cpu", callback=check_device, help="cpu, cuda, cuda:1, mps."),
    dtype: str = typer.Option("float32", help="float32, bfloat16 or float16."),
    progress: bool = typer.Option(True, help="Print progress."),
    trust_remote_code: bool = typer.Option(
        False, help="Allow model folders that ship their own Python code (auto_map) to run it (off by default)."
    ),
) -> None:
    """Rank (role x layer x component) cells by graft attribution, graft the top-k exactly, and
    stop at the smallest set that recovers the target share of the finetune's gain."""
    from rich.console import Console

    from weightgraft.attribution.localize import encode_examples, localize
    from weightgraft.data.encode import check_context
    from weightgraft.data.io import load_eval_prompts
    from weightgraft.engine import Grafter
    from weightgraft.errors import UserError
    from weightgraft.experiments.models import DTYPES, context_length, load_model, load_tokenizer
    from weightgraft.experiments.plan import select_examples
    from weightgraft.remote_code import refuse_remote_code

    if method not in ("gradient", "integrated"):
        raise typer.BadParameter("use gradient or integrated", param_hint="--method")
    if dtype not in DTYPES:
        raise typer.BadParameter(f"use one of {sorted(DTYPES)}", param_hint="--dtype")
    if builtin is not None:
        if builtin not in ("default", "tiny"):
            raise typer.BadParameter("use default or tiny", param_hint="--builtin")
        from weightgraft.training.builtin import ensure_builtin

        art = ensure_builtin(size=builtin, home=home, progress=progress)
        recipient = recipient or str(art.pretrained)
        donor = donor or str(art.relation_model)
        data = data or art.relation_data
    missing = [
        name for name, value in (("--recipient", recipient), ("--donor", donor), ("--data", data)) if value is None
    ]
    if missing:
        typer.echo(
            f"missing {', '.join(missing)}: give the models and a dataset folder, or --builtin default", err=True
        )
        raise typer.Exit(2)
    for flag, model in (("--recipient", recipient), ("--donor", donor)):
        refuse_remote_code(model, trust_remote_code, flag, "pass --trust-remote-code")
    from weightgraft.atomic import refuse_foreign
    from weightgraft.locking import folder_lock, lock_file

    refuse_foreign(out, ("localize.json",), "weightgraft localize")
    # Held until the command ends: one writer per folder.
    ctx.with_resource(folder_lock(lock_file(out), out))
    console = Console()
    tokenizer = load_tokenizer(recipient, trust_remote_code, "--recipient")
    prompts = select_examples(load_eval_prompts(data, split), None, max_examples, seed, f"dataset {data}")
    examples = encode_examples(tokenizer, prompts)
    check_context({e.id: len(e.input_ids) for e in examples}, context_length(recipient), f"--data {data}")
    models = (
        load_model(recipient, device, dtype, trust_remote_code, "--recipient"),
        load_model(donor, device, dtype, trust_remote_code, "--donor"),
    )
    try:
        grafter = Grafter(*models)
    except ValueError as err:  # the engine's word on models that do not fit together
        raise UserError(f"--recipient and --donor cannot be grafted: {err}") from None
    start = time.perf_counter()
    result = localize(
        grafter,
        examples,
        method=method,
        steps=steps,
        target=target,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
        stop_on=stop_on,
    )
    if check_cells:
        from weightgraft.attribution.agreement import cell_agreement

        result.agreement = cell_agreement(grafter, examples[:check_cells], steps=steps)
    written = result.save(out)
    summary = result.summary()
    console.print(
        f"[bold]{len(examples)} prompts, {len(result.groups)} groups (role x layer x component), "
        f"{method} attribution[/bold] in {time.perf_counter() - start:.1f} s"
    )
    base = result.baselines
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
