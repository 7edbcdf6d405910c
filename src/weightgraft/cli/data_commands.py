"""`weightgraft data`: the command parses its options and calls `data.family.write_datasets`.

Kept apart from `pretrain` and `train` (cli/training_commands.py) so that it starts without torch.
"""

from __future__ import annotations

from pathlib import Path

import typer

from weightgraft.data.family import KINDS_HELP, DataRequest, write_datasets


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
    request = DataRequest(
        seed=seed,
        kinds=kinds,
        facts_per_kind=facts_per_kind,
        relation=relation,
        task=task,
        freetext=freetext,
        texts_per_fact=texts_per_fact,
        articles_per_fact=articles_per_fact,
        known=known,
        user_facts=user_facts,
        articles=articles,
    )
    for name, n in write_datasets(request, out, overwrite):
        typer.echo(f"wrote {out / name} ({n} facts)")


def register(app: typer.Typer) -> None:
    app.command("data")(data)
