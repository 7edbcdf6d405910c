"""What the built-in model organism can and cannot show of the paper, for the demo's report.

The demo's verdict is decided on its own numbers; this section says beforehand why a reader
should expect that verdict on the built-in models (the measurements are in
docs/builtin_model.md). It is added only when every model of the demo is a built-in one.
"""

from __future__ import annotations

from dataclasses import replace

from weightgraft.reporting.study_contract import Study

ORGANISM_LINES = [
    "## What the built-in organism can show",
    "",
    "The built-in models are a small model (8 layers, width 128) pretrained on 4 M tokens of a "
    "generated world (weights shipped with weightgraft, which its `pretrain` command remakes), and "
    "its finetunes (docs/builtin_model.md). They are built so that the paper's questions can be "
    "asked on a laptop, not to match its levels:",
    "",
    "- **The position claims** (FE+LT recovers SFT; every other position, (FE+LT)^C, stays at PRE): "
    "the organism is built to show them. Its finetunes keep the unembedding, the final norm, the "
    "token embedding and the first three blocks frozen, so a new fact is written by the later layers "
    "at the first entity and the last token, which the position conditions graft.",
    "- **The component claims** (SFT's components at the last token, fourth quarter, onto the "
    "one-direction model): their reference gaps are defined (grafting ATTN+O+FFN adds about 0.26-0.33 "
    "of top-5 over the one-direction model), but the last-token lookup is spread over blocks 3-7, so "
    "the fourth quarter (blocks 6-7) carries under half of SFT's gain. O+FFN ≈ ATTN+O+FFN can "
    "appear; removing O costs a little (about 0.05 top-5 and 0.01 probability here; the paper "
    "measures 29-41 points of top-5 in billion-parameter models), close to the claim's threshold, "
    "so 52 facts are expected to leave it undecided.",
    "- **SFT's level**: about 0.95 top-5 on the held-out paper sentences (the paper's models: "
    "0.99-1.0). The relation and one-direction models are each the average of the weights of two "
    "finetunes that differ only in their seed: one finetune reaches 0.91-0.96 depending on its seed "
    "and the order of its texts (seeds 0 and 1: 0.91 and 0.93), their average 0.96. Lowest on sentence 1, which has no title: for real actors the new co-star competes with "
    "the real ones the model read about in pretraining. The relation model keeps a top-1 of about "
    "0.81 on those real films (PRE 0.95).",
    "",
]


def with_organism(study: Study) -> Study:
    """`study` with the organism's section before its deviations."""
    deviations = study.deviations
    return replace(study, deviations=lambda: ORGANISM_LINES + deviations())
