"""Component expressions (`ATTN+O+FFN`, `O+DOWN`, `[o, mlp]`, `WEIGHTS`) in engine names.

Names and their meaning live in `vocabulary` (the paper's ATTN is q,k,v; the engine's `attn`
group is q,k,v,o). Norms belong to none of the paper's sets, so component grafts leave every
norm to the recipient.
"""

from __future__ import annotations

from weightgraft.experiments.vocabulary import (
    AUTHORS_EVERY_WEIGHT,
    BLOCKS,
    EMBEDDINGS,
    ENGINE_NAMES,
    ENGINE_PER_LAYER,
    EVERY_WEIGHT,
    OPTIONAL,
    PAPER_ATOMS,
)

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
