"""The built-in model family's recipes: every size-dependent choice (`BuiltinSpec`, one per size
in `SPECS`), with the versions that name the built folders and why each choice is what it is.
Part of the built-in models' bytes: changing a value here changes them (and needs a new
`BUILTIN_VERSION`; `WORLD_VERSION` too when the world, the tokenizer or pretraining change)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from weightgraft.training.finetune import FinetuneConfig
from weightgraft.training.pretrain import PretrainConfig

BUILTIN_VERSION = "12"
# The version in which the world, the tokenizer and pretraining last changed. Their steps' recipes
# carry this one, not BUILTIN_VERSION, so a version that changes only the datasets or finetunes
# (11 added title-free texts, 12 averaged finetunes) keeps the shipped pretrained weights, whose record names the recipe.
WORLD_VERSION = "10"
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
    title_free_per_fact: int  # title-free texts per fact besides texts_per_fact (TITLE_FREE_TEMPLATES)
    articles_per_fact: int
    finetune: FinetuneConfig  # the relation model's; the others differ only in their epochs
    # The relation and one-direction models are each the weight average of this many finetunes
    # with seeds finetune.seed, +1, ... (training.average); 1: a single finetune.
    averaged_seeds: int
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
            # Version 10: 2000 steps (4 M tokens; v9 500). Too slow for a cold demo on two cores
            # (about 10 minutes), so these weights ship with the package (training.shipped).
            steps=2000,
            lr=3e-3,
            seed=0,
        ),
        set_kinds={
            "relation": {"fake_fake": 34, "fake_real": 13, "real_shuffled": 13},
            "task": {"fake_fake": 30},
            "freetext": {"fake_fake": 18},
        },
        # Version 10: 22 training texts per fact and direction (v9 6; the paper 11), fewer epochs.
        texts_per_fact=44,
        # Version 11: 8 title-free texts per fact and direction (the fact without its film), so
        # that the relation is learned apart from the title too; sentence 1 asks it with none.
        title_free_per_fact=16,
        articles_per_fact=16,
        # Version 9: the token embedding and blocks 0-2 stay PRE's too (see SHARED_BLOCKS_WHY
        # above), at lr 3e-3 (2e-3 learned the facts more slowly with blocks frozen).
        # Version 11: a quarter of the examples general text (v10 half), the checkpoint chosen on
        # validation top-1 (top-5 sat at 0.99 from epoch 3 and chose nothing), a 5-epoch schedule
        # that stops once validation has not improved for an epoch (a seed-0 finetune's best
        # epoch is 2 and it stops after 3). One finetune of this recipe reaches SFT top-5 0.91-0.96
        # on the paper's sentences depending on its seed and text order (docs/builtin_model.md).
        finetune=FinetuneConfig(
            lr=3e-3,
            epochs=5,
            batch_size=16,
            mix_ratio=0.25,
            freeze_embeddings=True,
            freeze_unembeddings=True,
            freeze_final_norm=True,
            freeze_layers=3,
            seed=0,
            eval_k=1,
            early_stopping_patience=1,
        ),
        # Version 12: the relation and one-direction models are each the average of two finetunes
        # that differ only in their seed (training.average). Single finetunes of seeds 0, 1, 2
        # reached SFT top-5 0.911, 0.933, 0.922 on all 180 forward prompts; the averages of seeds
        # 0+1, 1+2 and 0+2 0.956, 0.956, 0.939, and of all three 0.950, so two members it is.
        averaged_seeds=2,
        # Version 11: the one-direction model's best epoch is 1 of a 3-epoch schedule (it stops
        # after 2); the task model, trained on texts of the same kinds, gets the same schedule;
        # the free-text set is unchanged (6, and may stop early). (v10: 2, 2, 6; v9: 6, 6, 6.)
        b2a_epochs=3,
        task_epochs=3,
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
        title_free_per_fact=0,
        articles_per_fact=12,
        finetune=FinetuneConfig(
            lr=3e-3, epochs=12, batch_size=16, mix_ratio=0.5, freeze_unembeddings=True, freeze_final_norm=True, seed=0
        ),
        averaged_seeds=1,
        b2a_epochs=12,
        task_epochs=12,
        freetext_epochs=12,
    ),
}
