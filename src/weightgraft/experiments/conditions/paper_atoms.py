"""The paper's own names in the condition language: its component atoms (ATTN, O, FFN, ...) and
the authors' layer bands (`authors_*`, their quarters).

They are the paper's, yet they live here and not in `weightgraft.paper` (which sits above
`experiments` and could register them, as it registers its presets in `preset_registry`),
because the condition language below the paper needs them before the paper is imported:
- the run config's own default, `ExperimentSpec.component_layers` (and `resolve_condition`'s),
  is `authors_fourth_quarter`, validated when a config is read;
- a shorthand string is a component set or a position expression by whether its parts are
  component atoms (`components.is_component_expr`), so every custom experiment that writes
  `O+FFN` relies on them, not only the paper's presets;
- run records are re-parsed below the paper (`experiments.shards` merges shards), and the plan
  turns `authors_*` bands into layers (`layers.concrete_layers`).
A registry would make all of these fail until `weightgraft.paper` is imported. The names only the
paper's presets use (the component figure's eight sets) live in `weightgraft.paper.presets`.
"""

from __future__ import annotations

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
