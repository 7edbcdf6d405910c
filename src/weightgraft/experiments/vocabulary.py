"""The experiments' vocabulary beyond the condition language (which is `experiments.conditions`):
prompt directions, the two fidelities a row is defined in, summary metrics and the run-config
roles of the built-in family's models. Reports and presets read these names from here.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

# Prompt directions: `forward` asks the first actor for the second (the paper's only direction).
Direction = Literal["forward", "reversed", "both"]

# ---- fidelity --------------------------------------------------------------------------------
# `authors`: the paper's presets exactly as the authors' code ran them (AUTHORS_EVERY_WEIGHT,
# the hybrid's split LT band). `clean`: weightgraft's own definitions (EVERY_WEIGHT with the
# position embedding, the recipient's unembedding unless asked, the hybrid's relation o,up,down
# over the whole grafted band). `both`: authors' rows under the plain names and the clean rows
# that differ on this model beside them, named with CLEAN_SUFFIX.
FIDELITIES = ("authors", "clean")
CLEAN_SUFFIX = " [clean]"
SAME_IN_BOTH = "authors = clean"  # the label of a row the two definitions compute alike
# Evaluation wording: `clean` (the paper's sentences as written) or `authors` (their verbatim
# strings, sentences 1 and 3 with the doubled "in").
WORDINGS = ("clean", "authors")

# ---- metrics ---------------------------------------------------------------------------------
# Every metric scored per example; each is summarised (summary.csv) and shown in the report's tables.
SUMMARY_METRICS = (
    "top1",
    "top5",
    "top10",
    "top50",
    "top100",
    "prob",
    "rank_median",
    "rank_mean",
    "mrr",
    "target_logprob",
    "exact_match",
)
HEADLINE_METRIC = "top5"  # the paper's headline metric
# The two metrics a claim is decided on (top-5 first), and on which a finer graft's effects and a
# localized set's recovery are reported (`localize` stops when both reach the target).
DECISION_METRICS = ("top5", "prob")
# A metric as the report writes it (any other by its own name).
METRIC_WORDS = {"top5": "top-5", "prob": "probability", "top1": "top-1", "target_logprob": "target log-probability"}


# ---- model roles -----------------------------------------------------------------------------
class ModelRole(str, Enum):
    """The run-config keys of the built-in family's models, by the part each plays: the
    pretrained recipient and its finetunes (relation facts in both orders; the task; the relation
    facts in the B2A order only, the paper's one-direction model; generated articles). A `str`
    enum: configs and files hold the plain values, which compare equal to the members."""

    PRE = "pre"
    SFT = "sft"
    TASK = "task"
    B2A = "b2a"
    FREETEXT = "freetext"

    __str__ = str.__str__  # the value, in every Python (not "ModelRole.PRE")


# The built-in model that plays each role: a field of `training.builtin.BuiltinArtifacts` (the one
# map of roles to built-in models, for `demo`, `localize --builtin` and `explore`).
BUILTIN_ROLE_FIELDS = {
    ModelRole.PRE: "pretrained",
    ModelRole.SFT: "relation_model",
    ModelRole.TASK: "task_model",
    ModelRole.B2A: "b2a_model",
    ModelRole.FREETEXT: "freetext_model",
}


def builtin_role_models(artifacts) -> dict[ModelRole, str]:
    """role -> the path of the built-in model that plays it (`artifacts`: a `BuiltinArtifacts`)."""
    return {role: str(getattr(artifacts, field)) for role, field in BUILTIN_ROLE_FIELDS.items()}
