"""The paper's component-set names (`ATTN+O+FFN`, `O+DOWN`, ...) in the engine's vocabulary.

In the paper ATTN means the attention computation without its output projection (queries, keys,
values), O the attention output projection, FFN the whole MLP. Norms belong to none of them, so
component grafts leave every norm to the recipient. BLOCKS is every per-layer parameter (used
where weight grafting is compared with activation patching of whole blocks).
"""

from __future__ import annotations

PAPER_COMPONENTS: dict[str, list[str]] = {
    "ATTN": ["q", "k", "v"],
    "O": ["o"],
    "FFN": ["mlp"],
    "UP": ["up"],
    "DOWN": ["down"],
    "GATE": ["gate"],
    "Q": ["q"],
    "K": ["k"],
    "V": ["v"],
    "NORMS": ["norms"],
}
# Names the engine treats as model-level or as groups; what remains of `grafter.components`
# is the per-layer vocabulary.
MODEL_LEVEL = {"embed", "pos_embed", "ln_final", "lm_head"}
GROUPS = {"attn", "mlp", "norms", "all"}
PER_LAYER = {"q", "k", "v", "o", "gate", "up", "down", "ln1", "ln2", "q_norm", "k_norm",
             "post_attn_norm", "post_mlp_norm"}
ENGINE_NAMES = PER_LAYER | MODEL_LEVEL | GROUPS


def is_component_expr(text: str) -> bool:
    """True when every '+'-separated part is a paper component name (ATTN, O, FFN, ...)."""
    parts = [p.strip() for p in text.split("+")]
    return all(p in PAPER_COMPONENTS or p == "BLOCKS" for p in parts)


def parse_components(value: str | list[str]) -> list[str]:
    """Engine component names for `ATTN+O`, `all`, `[o, mlp]`, ... (validated, order kept)."""
    parts = [p.strip() for p in value.split("+")] if isinstance(value, str) else list(value)
    names: list[str] = []
    for part in parts:
        if part in PAPER_COMPONENTS:
            names.extend(PAPER_COMPONENTS[part])
        elif part == "BLOCKS":
            names.append("BLOCKS")
        elif part in ENGINE_NAMES:
            names.append(part)
        else:
            known = ", ".join([*PAPER_COMPONENTS, "BLOCKS", *sorted(ENGINE_NAMES)])
            raise ValueError(f"unknown component {part!r} in {value!r}; known: {known}")
    return list(dict.fromkeys(names))


def resolve_for_model(names: list[str], available: list[str]) -> list[str] | str:
    """Expand BLOCKS against the model's own component list; keep `all` as the engine's string."""
    if names == ["all"]:
        return "all"
    out: list[str] = []
    for name in names:
        if name == "BLOCKS":
            out.extend(c for c in available if c in PER_LAYER)
        else:
            out.append(name)
    return list(dict.fromkeys(out))
