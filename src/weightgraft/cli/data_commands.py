"""`weightgraft data`, `weightgraft pretrain` and `weightgraft train`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

KINDS_HELP = "comma-separated kinds: fake_fake, fake_real, real_shuffled (real_real: the known films)"


def data(
    out: Path = typer.Option(..., "--out", help="Directory to write the dataset directories into."),
    seed: int = typer.Option(0, help="Seed: the same seed gives the same bytes."),
    kinds: str = typer.Option("fake_fake,fake_real,real_shuffled", help=KINDS_HELP),
    facts_per_kind: int = typer.Option(30, help="Facts generated of each kind (before the split)."),
    relation: int = typer.Option(30, help="Facts in the relation set."),
    task: int = typer.Option(30, help="Facts in the task set (disjoint from the relation set)."),
    freetext: int = typer.Option(0, help="Facts in a free-text set (generated articles); 0 for none."),
    texts_per_fact: int = typer.Option(16, help="Training texts per fact (articles and QA, both orders)."),
    articles_per_fact: int = typer.Option(8, help="Free-text articles per fact."),
    known: int = typer.Option(0, help="Also write a 'known' set: this many of our real films with their real leads (real_real)."),
    user_facts: Optional[Path] = typer.Option(None, help="JSONL of your own facts: builds one set named 'user'."),
    articles: Optional[Path] = typer.Option(None, help='JSONL of your own articles ({"text": ...}) to train on, with --user-facts for evaluation.'),
) -> None:
    """Generate seeded relation datasets (JSONL + manifest), loadable with `datasets`."""
    from weightgraft.data.build import build_dataset, split_disjoint
    from weightgraft.data.facts import GENERATED_KINDS, generate_facts, known_film_facts
    from weightgraft.data.io import read_user_articles, read_user_facts
    from weightgraft.data.names import NamePool

    if articles is not None and user_facts is None:
        raise typer.BadParameter("--articles needs --user-facts (the facts the articles state, for evaluation)")
    if user_facts is not None:
        facts = read_user_facts(user_facts)
        if articles is not None:
            path = build_dataset(out / "user", facts, seed, "articles", articles=read_user_articles(articles),
                                 extra_options={"articles": str(articles)})
        else:
            path = build_dataset(out / "user", facts, seed, "templates", texts_per_fact)
        typer.echo(f"wrote {path}")
        return
    chosen = [k.strip() for k in kinds.split(",") if k.strip()]
    bad = [k for k in chosen if k not in GENERATED_KINDS]
    if bad:
        raise typer.BadParameter(f"unknown kind(s) {bad}; {KINDS_HELP}")
    pool = NamePool(seed)
    known_facts = known_film_facts(seed, pool)
    facts = generate_facts({k: facts_per_kind for k in chosen}, seed, pool, known_facts)
    sizes = {"relation": relation, "task": task}
    if freetext:
        sizes["freetext"] = freetext
    parts = split_disjoint(facts, sizes)
    if known:
        if known > len(known_facts):
            raise typer.BadParameter(f"--known: only {len(known_facts)} real films in our list")
        parts["known"] = known_facts[:known]
    for offset, (name, part) in enumerate(parts.items()):
        style = "freetext" if name == "freetext" else "templates"
        per_fact = articles_per_fact if style == "freetext" else texts_per_fact
        path = build_dataset(out / name, part, seed + offset, style, per_fact)
        typer.echo(f"wrote {path} ({len(part)} facts)")


def pretrain(
    size: str = typer.Option("default", help="default or tiny."),
    home: Optional[Path] = typer.Option(None, help="Cache directory (default: $WEIGHTGRAFT_HOME or ~/.cache/weightgraft)."),
    finetunes: bool = typer.Option(False, help="Also build the relation, one-direction (B2A), task and free-text finetunes."),
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
    lr: float = typer.Option(1e-3, help="Learning rate (use ~1e-5 for large pretrained models)."),
    epochs: int = typer.Option(6),
    batch_size: int = typer.Option(16, "--batch"),
    precision: str = typer.Option("fp32", help="fp32, bf16 or fp16 (fp16 needs a GPU)."),
    freeze_embeddings: bool = typer.Option(False, help="Keep the input embeddings fixed."),
    freeze_unembeddings: bool = typer.Option(False, help="Keep the output embeddings (lm_head) fixed."),
    mix_ratio: float = typer.Option(0.0, help="Share of general text among training examples."),
    general_text: Optional[Path] = typer.Option(None, help='JSONL of general text ({"text": ...}) or a dataset directory whose train.jsonl is general text.'),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
    seed: int = typer.Option(0),
    trust_remote_code: bool = typer.Option(False, help="Run model code from the hub (off by default)."),
) -> None:
    """Finetune a causal LM on a dataset with Hugging Face Trainer (works under `accelerate launch`)."""
    from weightgraft.data.io import load_train_texts, read_user_articles
    from weightgraft.training.finetune import FinetuneConfig, finetune

    if precision not in ("fp32", "bf16", "fp16"):
        raise typer.BadParameter("--precision must be fp32, bf16 or fp16")
    general = None
    if general_text is not None:
        general = load_train_texts(general_text) if general_text.is_dir() else read_user_articles(general_text)
    config = FinetuneConfig(lr=lr, epochs=epochs, batch_size=batch_size, precision=precision,  # type: ignore[arg-type]
                            freeze_embeddings=freeze_embeddings, freeze_unembeddings=freeze_unembeddings,
                            mix_ratio=mix_ratio, device=device, seed=seed)
    result = finetune(model, data_dir, out, config, general_texts=general, trust_remote_code=trust_remote_code)
    typer.echo(f"saved {result.path} (best epoch {result.best_epoch}, validation top-{config.eval_k} "
               f"{result.best_accuracy:.3f}, {result.seconds:.0f}s)")


def register(app: typer.Typer) -> None:
    app.command("data")(data)
    app.command("pretrain")(pretrain)
    app.command("train")(train)
