"""The experiments' vocabulary, in one place: position roles, component sets, layer bands and
summary metrics. Every other module (config validation, conditions, presets, reports) reads its
names from here.

Component sets. The paper's names are upper case and mean the paper's things:
  ATTN = q, k, v (attention WITHOUT its output projection)   O = o
  FFN  = gate, up, down (the MLP; gate only where the model has one)
The engine's lower-case groups mean something else: engine `attn` = q, k, v, o (the whole
attention block), engine `mlp` = every MLP weight. So `ATTN+O` (paper) equals engine `attn`, and
a config that writes `attn` where it means the paper's ATTN grafts o as well. Reports and
condition descriptions spell every set out in engine components so the difference stays
visible.

Layer bands. The engine's bands split n layers as band k of m = [k*n//m, (k+1)*n//m). The
authors' code used q = n // 4 and quarters [0,q), [q,2q), [2q,3q), [3q,n): the fourth quarter
takes the remainder (Gemma's 18 layers: 12..17, where the engine's last_quarter is 13..17).
Presets use the authors' bands, named `authors_*`.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from weightgraft.adapters.base import GROUPS, MODEL_LEVEL, PER_LAYER
from weightgraft.engine.graft import BANDS

# Prompt directions: `forward` asks the first actor for the second (the paper's only direction).
Direction = Literal["forward", "reversed", "both"]

# ---- positions -------------------------------------------------------------------------------
# Paper name -> role name in `weightgraft.data.schema.Role`.
ROLE_OF_ATOM = {"FE": "first_entity", "M": "movie_title", "R": "relation", "LT": "last_token"}
ATOMS = (*ROLE_OF_ATOM, "other", "ALL", "NONE")

# ---- components ------------------------------------------------------------------------------
# Paper atoms -> engine components. Optional members (gate) are kept only where the model has them.
PAPER_ATOMS: dict[str, tuple[str, ...]] = {
    "ATTN": ("q", "k", "v"),
    "O": ("o",),
    "FFN": ("gate", "up", "down"),
    "UP": ("up",),
    "DOWN": ("down",),
    "GATE": ("gate",),
    "Q": ("q",),
    "K": ("k",),
    "V": ("v",),
    "NORMS": ("norms",),
}
OPTIONAL = {"gate"}  # GPT-2 and GPT-NeoX MLPs have no gate
# The component figure's eight sets, in the paper's order.
PAPER_COMPONENT_SETS = ("ATTN+O+FFN", "ATTN+O", "ATTN+FFN", "O+FFN", "O", "FFN", "O+UP", "O+DOWN")
# Every weight at a grafted position, as the paper's position conditions graft them: each
# decoder layer's weights and the embeddings, but not the final norm or the unembedding
# (the recipient's at every position, unless an experiment asks for the donor's).
EVERY_WEIGHT = "WEIGHTS"
# Every weight as the authors grafted it ("embeddings" = the token embedding only): the token
# embedding and each decoder layer's weights, never the position embedding (GPT-2's wpe). On a
# model whose unembedding is tied to the token embedding (one matrix), the unembedding goes
# with it: the donor's unembedding scores exactly the positions whose embedding is grafted
# (so a row gets the donor's unembedding where its last token's embedding is grafted). On an
# untied model the unembedding stays the recipient's. The final norm is never grafted.
AUTHORS_EVERY_WEIGHT = "AUTHORS_WEIGHTS"
# Every per-layer parameter: what activation patching of whole blocks compares with.
BLOCKS = "BLOCKS"
EMBEDDINGS = ("embed", "pos_embed")
UNEMBEDDING = ("lm_head",)
# Engine names (lower case), for configs that want them: the adapters' canonical names.
ENGINE_MODEL_LEVEL = frozenset(MODEL_LEVEL)
ENGINE_GROUPS = frozenset(GROUPS)
ENGINE_PER_LAYER = frozenset(PER_LAYER)
ENGINE_NAMES = ENGINE_PER_LAYER | ENGINE_MODEL_LEVEL | ENGINE_GROUPS

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

# ---- layer bands -----------------------------------------------------------------------------
AUTHOR_BANDS = (
    "authors_fourth_quarter",
    "authors_third_and_fourth_quarters",
    "authors_second_half",
    "authors_third_quarter_below_half",
    "authors_first_quarter",
    "authors_second_quarter",
    "authors_third_quarter",
)
LAYER_BANDS = ("all", *BANDS, *AUTHOR_BANDS)


def author_band(name: str, num_layers: int) -> list[int]:
    """The authors' quarters: q = n // 4; the fourth takes the remainder. Only
    `authors_third_quarter_below_half` may be empty (n % 4 < 2)."""
    q = num_layers // 4
    if q == 0:
        raise ValueError(f"band {name!r} needs at least 4 layers; the model has {num_layers}")
    spans = {
        "authors_first_quarter": (0, q),
        "authors_second_quarter": (q, 2 * q),
        "authors_third_quarter": (2 * q, 3 * q),
        "authors_fourth_quarter": (3 * q, num_layers),
        "authors_third_and_fourth_quarters": (2 * q, num_layers),
        # The hybrid model's relation layers, and the part of the grafted band [2q, n) below
        # them (empty when n % 4 < 2; layer 8 of Gemma's 18).
        "authors_second_half": (num_layers // 2, num_layers),
        "authors_third_quarter_below_half": (2 * q, num_layers // 2),
    }
    if name not in spans:
        raise ValueError(f"unknown authors' band {name!r}; known: {', '.join(AUTHOR_BANDS)}")
    start, stop = spans[name]
    return list(range(start, stop))


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


# ---- methods -------------------------------------------------------------------------------
class ConditionMethod(str, Enum):
    """How a condition brings in the donor: its weights, grafted through the engine (`weights`),
    or its residual stream after each grafted block, patched in (`activations`). A `str` enum:
    configs and files hold the plain values, which compare equal to the members."""

    WEIGHTS = "weights"
    ACTIVATIONS = "activations"

    __str__ = str.__str__  # the value, in every Python (not "ConditionMethod.WEIGHTS")


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
