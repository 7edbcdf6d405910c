"""`weightgraft data`, `weightgraft pretrain` and `weightgraft train`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import typer

from weightgraft.cli import check_device, check_positive

KINDS_HELP = "comma-separated kinds: fake_fake, fake_real, real_shuffled (real_real: the known films)"


def _check_counts(minimums: dict[str, tuple[int, int]]) -> None:
    """`--name value` must be at least its minimum (given as (value, minimum))."""
    from weightgraft.data.errors import DataError

    for name, (value, minimum) in minimums.items():
        if value < minimum:
            what = "a positive number" if minimum == 1 else f"at least {minimum}"
            raise DataError(f"--{name} must be {what} (got {value})")


def data(
    out: Path = typer.Option(..., "--out", help="Directory to write the dataset directories into."),
    seed: int = typer.Option(0, help="Seed: the same seed gives the same bytes."),
    kinds: str = typer.Option("fake_fake,fake_real,real_shuffled", help=KINDS_HELP),
    facts_per_kind: int = typer.Option(30, help="Facts generated of each kind (before the split)."),
    relation: int = typer.Option(
        30, help="Facts in the relation set (also written in one direction: relation_a2b, relation_b2a)."
    ),
    task: int = typer.Option(30, help="Facts in the task set (disjoint from the relation set); 0 for none."),
    freetext: int = typer.Option(0, help="Facts in a free-text set (generated articles); 0 for none."),
    texts_per_fact: int = typer.Option(16, help="Training texts per fact (articles and QA, both orders)."),
    articles_per_fact: int = typer.Option(8, help="Free-text articles per fact."),
    known: int = typer.Option(
        0, help="Also write a 'known' set: this many of our real films with their real leads (real_real)."
    ),
    user_facts: Path | None = typer.Option(
        None, help="JSONL of your own facts: builds a set named 'user' (and user_a2b, user_b2a)."
    ),
    articles: Path | None = typer.Option(
        None, help='JSONL of your own articles ({"text": ...}) to train on, with --user-facts for evaluation.'
    ),
    overwrite: bool = typer.Option(
        False, help="Write into a non-empty --out: replaces weightgraft's own files there, keeps all others."
    ),
) -> None:
    """Generate seeded relation datasets (JSONL + manifest), loadable with `datasets`.

    Each set with template texts is written three times: both orders (NAME), and one order only
    (NAME_a2b: the first actor named first; NAME_b2a: the second actor named first)."""
    from weightgraft.atomic import atomic_directory, refuse_nonempty
    from weightgraft.data.errors import DataError

    # Everything that can be checked is checked before any work (and before the slower imports).
    _check_counts(
        {
            "relation": (relation, 1),
            "task": (task, 0),
            "freetext": (freetext, 0),
            "known": (known, 0),
            "facts-per-kind": (facts_per_kind, 1),
            "texts-per-fact": (texts_per_fact, 2),
            "articles-per-fact": (articles_per_fact, 1),
        }
    )
    if articles is not None and user_facts is None:
        raise DataError("--articles needs --user-facts (the facts the articles state, for evaluation)")
    refuse_nonempty(out, overwrite)

    from weightgraft.data.family import generated_members, member_names, user_members, write_family

    if user_facts is not None:
        members = user_members(user_facts, articles, texts_per_fact)
    else:
        chosen = [k.strip() for k in kinds.split(",") if k.strip()]
        sizes = {"relation": relation, "task": task, "freetext": freetext}
        members = generated_members(seed, chosen, facts_per_kind, sizes, known, texts_per_fact, articles_per_fact)
    with atomic_directory(out, overwrite=True) as tmp:
        write_family(tmp, members, seed)
    for name, n in sorted((name, len(m.facts)) for m in members for name in member_names(m)):
        typer.echo(f"wrote {out / name} ({n} facts)")


def pretrain(
    size: Literal["default", "tiny"] = typer.Option("default", help="default or tiny."),
    home: Path | None = typer.Option(
        None, help="Cache directory (default: $WEIGHTGRAFT_HOME or ~/.cache/weightgraft)."
    ),
    finetunes: bool = typer.Option(
        False, help="Also build the relation, one-direction (B2A), task and free-text finetunes."
    ),
) -> None:
    """Build (or reuse) the built-in world, datasets, tokenizer and pretrained model."""
    from weightgraft.training.builtin import ensure_builtin

    if size not in ("default", "tiny"):
        raise typer.BadParameter("--size must be default or tiny")
    art = ensure_builtin(size, home=home, finetunes=finetunes)  # type: ignore[arg-type]
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
    device: str = typer.Option("auto", callback=check_device, help="auto, cpu, cuda, cuda:N or mps."),
    seed: int = typer.Option(0),
    trust_remote_code: bool = typer.Option(False, help="Run model code from the hub (off by default)."),
    overwrite: bool = typer.Option(
        False, help="Write into a non-empty --out: replaces weightgraft's own files there, keeps all others."
    ),
) -> None:
    """Finetune a causal LM on a dataset with Hugging Face Trainer (works under `accelerate launch`)."""
    from weightgraft.atomic import refuse_nonempty
    from weightgraft.data.errors import DataError

    refuse_nonempty(out, overwrite)  # before the slow imports and any work
    from weightgraft.data.io import load_train_texts, read_user_articles
    from weightgraft.training.finetune import FinetuneConfig, finetune

    if precision not in ("fp32", "bf16", "fp16"):
        raise DataError(f"--precision must be fp32, bf16 or fp16 (got {precision})")
    general = None
    if general_text is not None:
        general = load_train_texts(general_text) if general_text.is_dir() else read_user_articles(general_text)
    config = FinetuneConfig(
        lr=lr,
        epochs=epochs,
        batch_size=batch_size,
        precision=precision,  # type: ignore[arg-type]
        freeze_embeddings=freeze_embeddings,
        freeze_unembeddings=freeze_unembeddings,
        freeze_final_norm=freeze_final_norm,
        mix_ratio=mix_ratio,
        device=device,
        seed=seed,
    )
    result = finetune(
        model, data_dir, out, config, general_texts=general, trust_remote_code=trust_remote_code, overwrite=overwrite
    )
    typer.echo(
        f"saved {result.path} (best epoch {result.best_epoch}, validation top-{config.eval_k} "
        f"{result.best_accuracy:.3f}, {result.seconds:.0f}s)"
    )


def register(app: typer.Typer) -> None:
    app.command("data")(data)
    app.command("pretrain")(pretrain)
    app.command("train")(train)
