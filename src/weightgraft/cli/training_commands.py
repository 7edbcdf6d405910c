"""`weightgraft pretrain`, `train` and `average`: parse options, call `training.builtin.ensure_builtin`,
`training.finetune.finetune_from_files` or `training.average.average_weights`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from weightgraft.cli import check_device_option, check_positive
from weightgraft.data.data_errors import DataError
from weightgraft.training import GeneralLoss
from weightgraft.training.average import average_weights
from weightgraft.training.builtin import default_home, ensure_builtin, ship_pretrained
from weightgraft.training.finetune import FinetuneConfig, finetune_from_files


def pretrain(
    size: Literal["default", "tiny"] = typer.Option("default", help="default or tiny."),
    home: Path | None = typer.Option(
        None, help="Cache directory (default: $WEIGHTGRAFT_HOME or ~/.cache/weightgraft)."
    ),
    finetunes: bool = typer.Option(
        False, help="Also build the relation, one-direction (B2A), task and free-text finetunes."
    ),
    from_scratch: bool = typer.Option(
        False, help="Pretrain here even where the package ships the pretrained weights (same bytes, slower)."
    ),
    ship_to: Path | None = typer.Option(
        None,
        help="Pretrain here (as --from-scratch) and write the weights with their record into this folder "
        "as the package ships them; src/weightgraft/training/shipped remakes the package's files.",
    ),
) -> None:
    """Build (or reuse) the built-in world, datasets, tokenizer and pretrained model."""
    if ship_to is not None:
        typer.echo(f"shipped weights: {ship_pretrained(size, home or default_home(), ship_to)}")
    art = ensure_builtin(size, home=home, finetunes=finetunes, shipped=not (from_scratch or ship_to))
    names = ["pretrained", "world_data", "known_data", "relation_data", "b2a_data", "task_data", "freetext_data"]
    if finetunes:
        names += ["relation_model", "b2a_model", "task_model", "freetext_model"]
    for name in names:
        typer.echo(f"{name}: {getattr(art, name)}")


def train(
    model: str = typer.Option(..., help="Causal LM: a hub id or a local directory."),
    data_dir: Path = typer.Option(..., "--data", help="Dataset directory (from `weightgraft data`)."),
    out: Path = typer.Option(..., "--out", help="Where to save the finetuned model."),
    lr: float = typer.Option(
        1e-3, callback=check_positive, help="Learning rate (use ~1e-5 for large pretrained models)."
    ),
    epochs: int = typer.Option(6, min=1),
    batch_size: int = typer.Option(16, "--batch", min=1),
    precision: Literal["fp32", "bf16", "fp16"] = typer.Option("fp32", help="fp32, bf16 or fp16 (fp16 needs a GPU)."),
    freeze_embeddings: bool = typer.Option(False, help="Keep the input embeddings fixed."),
    freeze_unembeddings: bool = typer.Option(False, help="Keep the output embeddings (lm_head) fixed."),
    freeze_final_norm: bool = typer.Option(False, help="Keep the norm before the unembedding fixed."),
    mix_ratio: float = typer.Option(0.0, min=0.0, max=0.999, help="Share of general text among training examples."),
    general_text: Path | None = typer.Option(
        None, help='JSONL of general text ({"text": ...}) or a dataset directory whose train.jsonl is general text.'
    ),
    general_loss: GeneralLoss = typer.Option(
        "tokens",
        help="How the general text is learned: tokens (cross-entropy on them) or kl (the pretrained "
        "model's whole next-token distribution at each of its positions, from a frozen copy of --model).",
    ),
    device: str = typer.Option("auto", callback=check_device_option, help="auto, cpu, cuda, cuda:N or mps."),
    seed: int = typer.Option(0),
    trust_remote_code: bool = typer.Option(False, help="Run model code from the hub (off by default)."),
    overwrite: bool = typer.Option(
        False, help="Write into a non-empty --out: replaces weightgraft's own files there, keeps all others."
    ),
) -> None:
    """Finetune a causal LM on a dataset with Hugging Face Trainer (works under `accelerate launch`)."""
    config = FinetuneConfig(
        lr=lr,
        epochs=epochs,
        batch_size=batch_size,
        precision=precision,
        freeze_embeddings=freeze_embeddings,
        freeze_unembeddings=freeze_unembeddings,
        freeze_final_norm=freeze_final_norm,
        mix_ratio=mix_ratio,
        general_loss=general_loss,
        device=device,
        seed=seed,
    )
    result = finetune_from_files(model, data_dir, out, config, general_text, trust_remote_code, overwrite)
    typer.echo(
        f"saved {result.path} (best epoch {result.best_epoch}, validation top-{config.eval_k} "
        f"{result.best_accuracy:.3f}, {result.seconds:.0f}s)"
    )


def average(
    models: list[Path] = typer.Argument(..., help="Two or more finetunes of one base model (local folders)."),
    out: Path = typer.Option(..., "--out", help="Where to save the averaged model."),
    trust_remote_code: bool = typer.Option(False, help="Run model code from the model folders (off by default)."),
    overwrite: bool = typer.Option(
        False, help="Write into a non-empty --out: replaces weightgraft's own files there, keeps all others."
    ),
    weights: str | None = typer.Option(
        None,
        help="One weight per model, comma-separated, summing to 1 (default: uniform). "
        "PRE and its finetune with 0.3,0.7 keep 70% of the finetune's update.",
    ),
) -> None:
    """Average the weights of finetunes of one base model (e.g. `train` runs with different --seed),
    or interpolate a finetune towards its base model with --weights."""
    parsed = None if weights is None else _parse_weights(weights)
    path = average_weights(models, out, overwrite=overwrite, trust_remote_code=trust_remote_code, weights=parsed)
    what = "the mean" if parsed is None else f"the weighted mean ({weights})"
    typer.echo(f"saved {path} ({what} of {len(models)} models)")


def _parse_weights(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise DataError(f"--weights takes numbers separated by commas (e.g. 0.3,0.7), not {text!r}") from None


def register(app: typer.Typer) -> None:
    app.command("pretrain")(pretrain)
    app.command("train")(train)
    app.command("average")(average)
