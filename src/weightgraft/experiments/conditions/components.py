"""Component expressions (`ATTN+O+FFN`, `O+DOWN`, `[o, mlp]`, `WEIGHTS`) in engine names.

The paper's names are upper case and mean the paper's things (`paper_atoms.PAPER_ATOMS`):
  ATTN = q, k, v (attention WITHOUT its output projection)   O = o
  FFN  = gate, up, down (the MLP; gate only where the model has one); on a mixture-of-experts
         model, whose layers have no dense MLP, the whole MoE block: router, experts and any
         shared expert with its gate (the engine group `mlp` there)
The engine's lower-case groups mean something else: engine `attn` = q, k, v, o (the whole
attention block), engine `mlp` = every MLP weight. So `ATTN+O` (paper) equals engine `attn`, and
a config that writes `attn` where it means the paper's ATTN grafts o as well. Reports and
condition descriptions spell every set out in engine components so the difference stays
visible. Norms belong to none of the paper's sets, so component grafts leave every norm to the
recipient.
"""

from __future__ import annotations

from weightgraft.adapters.base import GROUPS, MODEL_LEVEL, MOE_COMPONENTS, PER_LAYER
from weightgraft.experiments.conditions.paper_atoms import PAPER_ATOMS

OPTIONAL = {"gate"}  # GPT-2 and GPT-NeoX MLPs have no gate
DENSE_FFN = ("gate", "up", "down")
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
SPECIAL = (EVERY_WEIGHT, AUTHORS_EVERY_WEIGHT, BLOCKS)
# One name per idea: the paper's ATTN is q, k, v; the engine's group `attn` is q, k, v and o. A run
# config speaks the paper's vocabulary, so it refuses the engine's spelling instead of silently
# grafting o as well; `Graft(components="attn")` keeps the engine's meaning.
ENGINE_ATTENTION_GROUP = "attn"


def is_component_expr(text: str) -> bool:
    """True when every '+'-separated part is a paper component name (ATTN, O, FFN, ...)."""
    parts = [p.strip() for p in text.split("+")]
    return all(p in PAPER_ATOMS or p == BLOCKS for p in parts)


def parse_components(value: str | list[str]) -> list[str]:
    """Engine component names for `ATTN+O`, `all`, `[o, mlp]`, ... (validated, order kept)."""
    parts = [p.strip() for p in value.split("+")] if isinstance(value, str) else list(value)
    names: list[str] = []
    for part in parts:
        if part == ENGINE_ATTENTION_GROUP:
            raise ValueError(
                f"ambiguous component 'attn' in {value!r}: in a run config write the paper's ATTN "
                "(q, k, v) or ATTN+O (q, k, v, o); the engine's lower-case group `attn` (q, k, v, o) "
                "is a Graft name only"
            )
        if part in PAPER_ATOMS:
            names.extend(PAPER_ATOMS[part])
        elif part in SPECIAL or part in ENGINE_NAMES:
            names.append(part)
        else:
            known = ", ".join([*PAPER_ATOMS, *SPECIAL, *sorted(ENGINE_NAMES - {ENGINE_ATTENTION_GROUP})])
            raise ValueError(f"unknown component {part!r} in {value!r}; known: {known}")
    return list(dict.fromkeys(names))


def resolve_for_model(names: list[str], available: list[str], tied: bool = False) -> list[str] | str:
    """Names a Graft on this model takes: WEIGHTS, AUTHORS_WEIGHTS and BLOCKS expanded against
    the model's own components (`tied`: its unembedding is its token embedding), optional ones
    (gate) dropped where absent, `all` kept as the engine's string."""
    if names == ["all"]:
        return "all"
    names = _ffn_on_moe(names, available)
    out: list[str] = []
    for name in names:
        if name == EVERY_WEIGHT:
            out.extend(c for c in available if c in EMBEDDINGS or c in ENGINE_PER_LAYER)
        elif name == AUTHORS_EVERY_WEIGHT:
            out.extend(c for c in available if c == "embed" or c in ENGINE_PER_LAYER)
            if tied and "lm_head" in available:
                out.append("lm_head")
        elif name == BLOCKS:
            out.extend(c for c in available if c in ENGINE_PER_LAYER)
        elif name in OPTIONAL and name not in available:
            continue
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def _ffn_on_moe(names: list[str], available: list[str]) -> list[str]:
    """On a mixture-of-experts model (no dense MLP), the paper's FFN (up and down named together)
    is the MoE block: its router, experts and shared expert where present. A lone up or down
    stays as named, and the Graft refuses it there."""
    block = [c for c in MOE_COMPONENTS if c in available]
    if not block or "up" in available or not {"up", "down"} <= set(names):
        return names
    out: list[str] = []
    for name in names:
        out.extend(block if name in DENSE_FFN else [name])
    return list(dict.fromkeys(out))


def describe(names: list[str]) -> str:
    """`o, gate, up, down` for the report; WEIGHTS and BLOCKS in words."""
    words = {
        EVERY_WEIGHT: "every weight (embeddings and every layer's weights; not the final norm or unembedding)",
        AUTHORS_EVERY_WEIGHT: "every weight as the authors grafted it (the token embedding, not the "
        "position embedding, and every layer's weights; on a tied model the unembedding with the "
        "embedding)",
        BLOCKS: "every per-layer weight",
        "all": "every weight incl. final norm and unembedding",
    }
    return ", ".join(words.get(n, n) for n in names)
