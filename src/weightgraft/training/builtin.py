"""The built-in model family: world, tokenizer, pretrained model, datasets and four finetunes.

Finetunes: the relation model (SFT: the relation facts in both orders), the one-direction model
(the same facts in the B2A order only: the reversal task's recipient, which knows the format but
not the forward relation the evaluation asks), the task model (other facts, both orders) and the
free-text model (generated articles).

`ensure_builtin` builds what is missing under `home` and reuses the rest. Each step writes its
directory in a temp folder renamed into place, so a finished step is never redone and an
interrupted one leaves nothing half-written. A file lock lets concurrent callers share the work.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from weightgraft.atomic import OWNED_RECORD, atomic_directory, remove_entry
from weightgraft.data.build import build_dataset, build_with_one_direction_sets, check_no_leak, split_by_kind
from weightgraft.data.facts import generate_facts
from weightgraft.data.io import load_train_texts, write_dataset
from weightgraft.data.templates import EVAL_TEMPLATES, VALIDATION_TEMPLATES, eval_prompts_for
from weightgraft.data.world import World
from weightgraft.training.finetune import FinetuneConfig
from weightgraft.training.pretrain import PretrainConfig

BUILTIN_VERSION = "9"
# Pretraining draws (tokens it trains on) / TOKENS_PER_DOCUMENT documents from the world: a rough
# average document length in tokens. Part of the built-in models' bytes: changing it changes them.
TOKENS_PER_DOCUMENT = 25
Size = Literal["default", "tiny"]

# Why the finetunes freeze the unembedding and the final norm (docs/builtin_model.md has the numbers).
# Measured on the default size under the v6 recipe (lr 2e-3, 6 epochs, everything trainable): the
# relation finetune moved every weight matrix by half its norm (||W_ft - W_pre|| / ||W_pre|| =
# 0.38-0.76 per layer matrix, lm_head 0.53, token embedding 0.45, final norm 0.13). With untied
# embeddings the loss reaches each name token's lm_head row directly, and the finetuned layers
# wrote their answer in a basis that only the finetuned lm_head reads: FE+LT grafted with PRE's
# unembedding recovered 0.61 of SFT's top-5 gain, with SFT's unembedding all of it. A
# billion-parameter model finetuned at 2e-5 barely moves its unembedding. Freezing lm_head and the
# final norm makes the finetunes put the new facts into the layers, where grafting can find them
# (FE+LT then recovers SFT's gain with PRE's unembedding); a lower lr (5e-4) instead left the
# facts unlearned (validation top-5 plateaued at 0.70) within the demo's time.
#
# SHARED_BLOCKS_WHY: why the default finetunes also keep the token embedding and blocks 0-2 (of 8)
# fixed (version 9). Trained fully at lr 2e-3, the relation and one-direction models each moved
# every layer matrix by 0.4-0.9 of its norm, and so drifted apart (||W_sft - W_b2a|| / ||W_pre||
# 0.4-0.9): the relation model wrote the new fact into the first entity's own representation in
# its early layers (its first-entity positions alone, grafted onto the one-direction model, lift
# top-5 from 0.21 to 0.46), and its late last-token components read features the one-direction
# model never computes. Grafting them onto that model added nothing (ATTN+O+FFN - B2A = 0.000
# [-0.037, 0.036] top-5), so the paper's component claims were undefined. With the first blocks
# shared bit for bit, both finetunes read one entity representation and the lookup moves into
# the later blocks at the last token (trial t8: ATTN+O+FFN - B2A = 0.21 [0.13, 0.27] top-5).
# Freezing the embedding alone did not do it (0.04 [-0.01, 0.10]); nor did more real-actor facts;
# freezing blocks 0-3 as well lowered SFT's top-5 (0.69 against 0.77) for no larger gap.
# docs/builtin_model.md has the trial table.


@dataclass(frozen=True)
class BuiltinSpec:
    """Every size-dependent choice of the built-in pipeline."""

    seed: int
    n_films: int
    n_first: int
    n_last: int
    n_background_films: int
    vocab_size: int
    tokenizer_docs: int
    general_docs: int
    pretrain: PretrainConfig
    set_kinds: dict[str, dict[str, int]]  # set (relation, task, freetext) -> facts of each kind
    texts_per_fact: int
    articles_per_fact: int
    finetune: FinetuneConfig  # the relation model's; the others differ only in their epochs
    b2a_epochs: int
    task_epochs: int
    freetext_epochs: int


SPECS: dict[str, BuiltinSpec] = {
    "default": BuiltinSpec(
        seed=0,
        n_films=60,
        n_first=280,
        n_last=200,
        n_background_films=150,
        vocab_size=2048,
        tokenizer_docs=4000,
        general_docs=3000,
        pretrain=PretrainConfig(
            hidden_size=128,
            num_layers=8,
            num_heads=4,
            intermediate_size=384,
            block_size=128,
            batch_size=16,
            steps=500,
            lr=3e-3,
            seed=0,
        ),
        set_kinds={
            "relation": {"fake_fake": 34, "fake_real": 13, "real_shuffled": 13},
            "task": {"fake_fake": 30},
            "freetext": {"fake_fake": 18},
        },
        texts_per_fact=12,
        articles_per_fact=16,
        # Version 9: the token embedding and blocks 0-2 stay PRE's too (see SHARED_BLOCKS_WHY
        # above), at lr 3e-3 (2e-3 learned the facts more slowly with blocks frozen).
        finetune=FinetuneConfig(
            lr=3e-3,
            epochs=10,
            batch_size=16,
            mix_ratio=0.5,
            freeze_embeddings=True,
            freeze_unembeddings=True,
            freeze_final_norm=True,
            freeze_layers=3,
            seed=0,
        ),
        # The one-direction model's held-out top-5 plateaus by epoch 5 (0.95 at 5, 6, 7 and 8 under
        # v7's 10 epochs), so 6 epochs keep the cold demo within 10 minutes on 2 cores.
        b2a_epochs=6,
        task_epochs=6,
        freetext_epochs=6,
    ),
    "tiny": BuiltinSpec(
        seed=0,
        n_films=12,
        n_first=40,
        n_last=40,
        n_background_films=20,
        vocab_size=768,
        tokenizer_docs=1000,
        general_docs=400,
        pretrain=PretrainConfig(
            hidden_size=64,
            num_layers=4,
            num_heads=4,
            intermediate_size=192,
            block_size=64,
            batch_size=16,
            steps=300,
            lr=4e-3,
            seed=0,
        ),
        set_kinds={
            "relation": {"fake_fake": 2, "fake_real": 2, "real_shuffled": 2},
            "task": {"fake_fake": 6},
            "freetext": {"fake_fake": 6},
        },
        texts_per_fact=12,
        articles_per_fact=12,
        finetune=FinetuneConfig(
            lr=3e-3, epochs=12, batch_size=16, mix_ratio=0.5, freeze_unembeddings=True, freeze_final_norm=True, seed=0
        ),
        b2a_epochs=12,
        task_epochs=12,
        freetext_epochs=12,
    ),
}


@dataclass
class BuiltinArtifacts:
    pretrained: Path
    relation_model: Path
    b2a_model: Path  # the one-direction model: the relation facts in the B2A order only
    task_model: Path
    freetext_model: Path
    relation_data: Path
    b2a_data: Path  # relation facts, B2A training texts; the same eval prompts as relation_data
    known_data: Path  # the world's real films (which PRE knows): eval prompts over all of them
    task_data: Path
    freetext_data: Path
    world_data: Path  # known films: facts, general text (train.jsonl), held-out films' prompts
    root: Path
    size: str = "default"
    seconds: dict[str, float] = field(default_factory=dict)  # time of each step built in this call


def default_home() -> Path:
    return Path(os.environ.get("WEIGHTGRAFT_HOME") or Path.home() / ".cache" / "weightgraft")


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_world(spec: BuiltinSpec) -> World:
    return World(
        spec.seed,
        n_films=spec.n_films,
        n_first=spec.n_first,
        n_last=spec.n_last,
        n_background_films=spec.n_background_films,
    )


def write_world_dataset(world: World, directory: Path, general_docs: int) -> Path:
    """Known films as a dataset: general text to mix into finetuning, held-out films' prompts."""
    general = world.documents(general_docs, "general")
    evaluation = [p for f in world.heldout_films for p in eval_prompts_for(f, EVAL_TEMPLATES)]
    validation = [p for f in world.heldout_films for p in eval_prompts_for(f, VALIDATION_TEMPLATES)]
    check_no_leak(general, evaluation + validation)
    return write_dataset(
        directory,
        world.films,
        general,
        validation,
        evaluation,
        world.seed,
        {"style": "world", "heldout_films": sorted(world.heldout_ids)},
    )


def write_known_dataset(world: World, directory: Path) -> Path:
    """The known-facts check: every world film (real films with their real leads, which the
    pretrained model read about) asked with the evaluation templates. No training text: it
    measures what a finetune kept. Films stated in evaluation wording during pretraining are
    listed as `exposed_films` in the manifest; the others were read only in articles."""
    evaluation = [p for f in world.films for p in eval_prompts_for(f, EVAL_TEMPLATES)]
    return write_dataset(
        directory,
        world.films,
        [],
        [],
        evaluation,
        world.seed,
        {
            "style": "known",
            "heldout_films": sorted(world.heldout_ids),
            "exposed_films": sorted(f.id for f in world.exposed_films),
        },
    )


def ensure_builtin(
    size: Size = "default", home: Path | None = None, progress: bool = True, finetunes: bool = True
) -> BuiltinArtifacts:
    """Build what is missing and return the paths; `finetunes=False` stops after the pretrained
    model and the datasets (the finetune paths are then returned but may not exist yet)."""
    if size not in SPECS:
        raise ValueError(f"unknown size {size!r}; use one of {sorted(SPECS)}")
    spec = SPECS[size]
    root = Path(home or default_home()) / f"builtin-{size}-v{BUILTIN_VERSION}"
    art = BuiltinArtifacts(
        pretrained=root / "models" / "pretrained",
        relation_model=root / "models" / "relation",
        b2a_model=root / "models" / "relation_b2a",
        task_model=root / "models" / "task",
        freetext_model=root / "models" / "freetext",
        relation_data=root / "data" / "relation",
        b2a_data=root / "data" / "relation_b2a",
        known_data=root / "data" / "known",
        task_data=root / "data" / "task",
        freetext_data=root / "data" / "freetext",
        world_data=root / "data" / "world",
        root=root,
        size=size,
    )

    def say(message: str) -> None:
        if progress:
            print(f"[weightgraft {size}] {message}", file=sys.stderr, flush=True)

    def step(name: str, target: Path, build) -> None:
        if target.exists():
            return
        say(f"building {name} ...")
        start = time.time()
        build()
        art.seconds[name] = round(time.time() - start, 1)
        say(f"{name} ready in {art.seconds[name]:.1f}s -> {target}")

    with _locked(root.parent / f".builtin-{size}.lock"):
        world_cache: list[World] = []

        def world() -> World:
            if not world_cache:
                world_cache.append(build_world(spec))
            return world_cache[0]

        step("world", art.world_data, lambda: write_world_dataset(world(), art.world_data, spec.general_docs))
        step("known facts", art.known_data, lambda: write_known_dataset(world(), art.known_data))

        set_names = ("relation", "relation_a2b", "relation_b2a", "task", "freetext")

        def build_sets() -> None:
            w = world()
            totals: dict[str, int] = {}
            for counts in spec.set_kinds.values():
                for kind, n in counts.items():
                    totals[kind] = totals.get(kind, 0) + n
            facts = generate_facts(totals, spec.seed, w.pool, w.films, real_actors=w.actors, forbidden=w.person_names())
            parts = split_by_kind(facts, spec.set_kinds)
            with atomic_directory(root / "data" / "sets", overwrite=True) as tmp:
                build_with_one_direction_sets(tmp / "relation", parts["relation"], spec.seed, spec.texts_per_fact)
                build_dataset(tmp / "task", parts["task"], spec.seed + 1, "templates", spec.texts_per_fact)
                build_dataset(tmp / "freetext", parts["freetext"], spec.seed + 2, "freetext", spec.articles_per_fact)
            for name in set_names:
                os.replace(root / "data" / "sets" / name, root / "data" / name)
            (root / "data" / "sets" / OWNED_RECORD).unlink(missing_ok=True)
            (root / "data" / "sets").rmdir()

        if not all((root / "data" / name).exists() for name in set_names):
            for name in set_names:
                if (root / "data" / name).exists():  # a partial set from an older run: rebuild all together
                    remove_entry(root / "data", name)
            step("datasets", art.relation_data, build_sets)

        def build_pretrained() -> None:
            from weightgraft.training.pretrain import pretrain
            from weightgraft.training.tokenizer import train_bpe_tokenizer

            w = world()
            tokenizer = train_bpe_tokenizer(w.documents(spec.tokenizer_docs, "tokenizer"), spec.vocab_size)
            cfg = spec.pretrain
            docs = w.documents(cfg.steps * cfg.batch_size * cfg.block_size // TOKENS_PER_DOCUMENT, "pretrain")
            pretrain(
                docs,
                tokenizer,
                cfg,
                art.pretrained,
                progress=progress,
                extra_record={
                    "world_seed": spec.seed,
                    "n_films": spec.n_films,
                    "size": size,
                    "vocab_size": spec.vocab_size,
                },
            )

        step("pretrained model", art.pretrained, build_pretrained)
        if not finetunes:
            return art

        def finetune_on(data: Path, out: Path, epochs: int) -> None:
            from dataclasses import replace

            from weightgraft.training.finetune import finetune

            cfg = replace(spec.finetune, epochs=epochs)
            finetune(art.pretrained, data, out, cfg, general_texts=load_train_texts(art.world_data), progress=progress)

        step(
            "relation model",
            art.relation_model,
            lambda: finetune_on(art.relation_data, art.relation_model, spec.finetune.epochs),
        )
        step(
            "one-direction (B2A) model",
            art.b2a_model,
            lambda: finetune_on(art.b2a_data, art.b2a_model, spec.b2a_epochs),
        )
        step("task model", art.task_model, lambda: finetune_on(art.task_data, art.task_model, spec.task_epochs))
        step(
            "free-text model",
            art.freetext_model,
            lambda: finetune_on(art.freetext_data, art.freetext_model, spec.freetext_epochs),
        )
    return art
