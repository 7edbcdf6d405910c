"""The explorer's grid: token positions x columns, a column being one component group of one layer
(or a model-level group: the token embedding, the position embedding, the final norm, the
unembedding; each its own column, so that both definitions of a position condition can be drawn:
the clean one, and the authors', which on a tied model grafts the donor's unembedding with the
token embedding, docs/methodology.md).

A selection is a list of `Cells` (one column, some positions, one donor). `to_grafts` turns it into
the fewest `Graft`s that graft exactly those cells, so the Python the page shows stays short and
the numbers it shows are what `Grafter.last_logits` gives for that list.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from weightgraft.engine.graft import Graft
from weightgraft.errors import UserError
from weightgraft.experiments.conditions.paper_atoms import author_band
from weightgraft.experiments.plan.selection import ties_embeddings
from weightgraft.explore.experts import check_expert, expert_count, expert_grafts
from weightgraft.explore.heads import HeadCounts, check_head, head_counts, head_grafts

# Component groups of the grid, in the paper's names (ATTN is q, k, v without o; with multi-latent
# attention also the key-value latent k and v read). Each keeps the members a model has; a group
# with none is left out.
LAYER_GROUPS: dict[str, tuple[str, ...]] = {
    "ATTN": ("q", "k", "v", "kv_latent"),
    "O": ("o",),
    # On a mixture-of-experts layer FFN is the whole MoE block, as in the paper's sets (methodology.md).
    "FFN": ("gate", "up", "down", "router", "experts", "shared_expert", "shared_expert_gate"),
    "NORMS": ("ln1", "ln2", "q_norm", "k_norm", "post_attn_norm", "post_mlp_norm"),
}
MODEL_GROUPS: dict[str, tuple[str, ...]] = {
    "EMB": ("embed",),
    "POS": ("pos_embed",),
    "FNORM": ("ln_final",),
    "UNEMB": ("lm_head",),
}
# Named component sets over groups. WEIGHTS is the clean "every weight" of a position condition:
# the embeddings and every layer's weights, not the final norm or unembedding. AUTHORS_WEIGHTS is
# the authors' (token embedding only; on a tied model the unembedding with it), offered where the
# model ties its unembedding to its embedding (`Grid.tied`).
COMPONENT_SETS: dict[str, tuple[str, ...]] = {
    "WEIGHTS": ("EMB", "POS", "ATTN", "O", "FFN", "NORMS"),
    "AUTHORS_WEIGHTS": ("EMB", "ATTN", "O", "FFN", "NORMS", "UNEMB"),
    "ATTN+O+FFN": ("ATTN", "O", "FFN"),
    "ATTN+O": ("ATTN", "O"),
    "O+FFN": ("O", "FFN"),
    "ATTN": ("ATTN",),
    "O": ("O",),
    "FFN": ("FFN",),
    "NORMS": ("NORMS",),
    "EMB": ("EMB",),
    "UNEMB": ("UNEMB",),
    "FNORM+UNEMB": ("FNORM", "UNEMB"),
    "all": ("EMB", "POS", "ATTN", "O", "FFN", "NORMS", "FNORM", "UNEMB"),
}
AUTHOR_BAND_NAMES = {
    "authors_first_quarter": "Q1",
    "authors_second_quarter": "Q2",
    "authors_third_quarter": "Q3",
    "authors_fourth_quarter": "Q4",
    "authors_third_and_fourth_quarters": "Q3+Q4",
}


@dataclass(frozen=True)
class Column:
    """One column of the grid: a group at one layer, or a model-level group (layer None)."""

    group: str
    layer: int | None


@dataclass(frozen=True)
class Cells:
    """Grafted cells of one column from one donor, at `positions` (real-token indices); `head`:
    only that attention head of the column (O and ATTN, see `explore.heads`); `expert`: only that
    expert of a MoE layer's FFN column, the router staying the recipient's (`explore.experts`)."""

    donor: str
    group: str
    layer: int | None
    positions: tuple[int, ...]
    head: int | None = None
    expert: int | None = None


class GridError(UserError, ValueError):
    """A selection that does not fit the grid (unknown group or donor, a position or layer out of
    range, a head or expert the model does not have, a cell given two donors)."""


class Grid:
    """The columns and groups of one model, and selections on it."""

    def __init__(
        self,
        components: Sequence[str],
        num_layers: int,
        donors: Sequence[str],
        heads: HeadCounts | None = None,
        tied: bool = False,
        experts: int | None = None,
    ):
        have = set(components)
        self.heads = heads
        self.tied = tied  # the recipient's unembedding is its token embedding
        self.num_layers = num_layers
        self.donors = list(donors)
        self.layer_groups = {g: [c for c in m if c in have] for g, m in LAYER_GROUPS.items()}
        self.layer_groups = {g: m for g, m in self.layer_groups.items() if m}
        self.model_groups = {g: [c for c in m if c in have] for g, m in MODEL_GROUPS.items()}
        self.model_groups = {g: m for g, m in self.model_groups.items() if m}
        # Experts per MoE block, where FFN holds them; None on a dense model.
        self.experts = experts if "experts" in self.layer_groups.get("FFN", ()) else None
        self.order = [c for c in components]  # the model's component order, for stable output
        columns = [Column(g, None) for g in ("EMB", "POS") if g in self.model_groups]
        columns += [Column(g, layer) for g in self.layer_groups for layer in range(num_layers)]
        columns += [Column(g, None) for g in ("FNORM", "UNEMB") if g in self.model_groups]
        self.columns = columns

    @classmethod
    def of(cls, grafter) -> Grid:
        """The grid of a Grafter's models, with their heads where the config counts them."""
        tied = ties_embeddings(grafter.recipient)
        heads, experts = head_counts(grafter), expert_count(grafter)
        return cls(grafter.components, grafter.num_layers, grafter.donor_names, heads, tied, experts)

    def members(self, group: str) -> list[str]:
        return self.layer_groups.get(group) or self.model_groups[group]

    def bands(self) -> dict[str, list[int]]:
        """Layer selections: every layer, and the authors' quarters (where the model has 4+ layers)."""
        out = {"all layers": list(range(self.num_layers))}
        if self.num_layers >= 4:
            out.update({label: author_band(name, self.num_layers) for name, label in AUTHOR_BAND_NAMES.items()})
        return out

    def component_sets(self) -> dict[str, list[str]]:
        groups = set(self.layer_groups) | set(self.model_groups)
        out = {name: [g for g in members if g in groups] for name, members in COMPONENT_SETS.items()}
        if not self.tied:  # untied: the authors' unembedding stays the recipient's
            out["AUTHORS_WEIGHTS"] = [g for g in out["AUTHORS_WEIGHTS"] if g != "UNEMB"]
        return {name: members for name, members in out.items() if members}

    def describe(self) -> dict:
        """The grid as the page draws it."""
        return {
            "num_layers": self.num_layers,
            "columns": [{"group": c.group, "layer": c.layer} for c in self.columns],
            "groups": {**{g: m for g, m in self.model_groups.items()}, **self.layer_groups},
            "bands": self.bands(),
            "component_sets": self.component_sets(),
            "donors": self.donors,
            "heads": self._heads_view(),
            "experts": self._experts_view(),
            "tied": self.tied,
        }

    def _heads_view(self) -> dict | None:
        """Head counts, and the columns that split into heads (None: the model has no heads)."""
        if self.heads is None:
            return None
        view = self.heads.describe()
        view["groups"] = {g: n for g, n in view["groups"].items() if g in self.layer_groups}
        return view if view["groups"] else None

    def _experts_view(self) -> dict | None:
        """Experts per MoE block, and the column that splits into them (None: a dense model)."""
        if self.experts is None:
            return None
        return {"count": self.experts, "groups": {"FFN": self.experts}}

    # --- selections ---------------------------------------------------------------------------
    def check(self, cells: Sequence[Cells], num_tokens: int) -> list[Cells]:
        """The cells, checked against the grid and a prompt of `num_tokens` tokens; one donor per
        cell (its heads included: the engine takes one donor per position, layer and component)."""
        owner: dict[tuple[str, int | None, int], str] = {}
        for c in cells:
            self._check_column(c)
            for p in c.positions:
                if not 0 <= p < num_tokens:
                    raise GridError(f"position {p} is outside the prompt's {num_tokens} tokens")
                other = owner.setdefault((c.group, c.layer, p), c.donor)
                if other != c.donor:
                    where = f"{c.group}" + ("" if c.layer is None else f" layer {c.layer}")
                    raise GridError(f"cell {where}, position {p} is given to two donors ({other}, {c.donor})")
        return list(cells)

    def _check_column(self, c: Cells) -> None:
        if c.donor not in self.donors:
            raise GridError(f"unknown donor {c.donor!r}; this session's donors are {self.donors}")
        if c.group in self.model_groups:
            if c.layer is not None:
                raise GridError(f"group {c.group} has no layers; give layer null")
        elif c.group in self.layer_groups:
            if c.layer is None or not 0 <= c.layer < self.num_layers:
                raise GridError(f"group {c.group} needs a layer in 0..{self.num_layers - 1}, not {c.layer}")
        else:
            known = [*self.model_groups, *self.layer_groups]
            raise GridError(f"unknown component group {c.group!r}; use one of {known}")
        where = "" if c.layer is None else f" layer {c.layer}"
        if c.head is not None and c.expert is not None:
            raise GridError("a cell is one head or one expert, not both; give head or expert")
        if c.head is not None:
            why = check_head(c.group, c.head, self.heads, where)
            if why is not None:
                raise GridError(why)
        if c.expert is not None:
            why = check_expert(c.group, c.expert, self.experts, where)
            if why is not None:
                raise GridError(why)

    def to_grafts(self, cells: Sequence[Cells]) -> list[Graft]:
        """The fewest Grafts (up to this grouping) covering exactly these cells.

        Per donor and position set: the layer columns that share a component set become one Graft
        over their layers; model-level groups join the first Graft with the same positions.
        """
        # (donor, positions) -> layer -> components; (donor, positions) -> model-level components
        by_layer: dict[tuple[str, tuple[int, ...]], dict[int, set[str]]] = {}
        model: dict[tuple[str, tuple[int, ...]], set[str]] = {}
        merged: dict[tuple[str, str, int | None], set[int]] = {}
        heads: dict[tuple[str, str, int, int], set[int]] = {}
        experts: dict[tuple[str, int, int], set[int]] = {}
        for c in cells:
            if c.head is None and c.expert is None:
                merged.setdefault((c.donor, c.group, c.layer), set()).update(c.positions)
        for c in cells:  # a head of a cell grafted whole is in it already
            if c.head is not None and c.layer is not None:
                whole = merged.get((c.donor, c.group, c.layer), set())
                heads.setdefault((c.donor, c.group, c.layer, c.head), set()).update(set(c.positions) - whole)
            elif c.expert is not None and c.layer is not None:
                whole = merged.get((c.donor, c.group, c.layer), set())
                experts.setdefault((c.donor, c.layer, c.expert), set()).update(set(c.positions) - whole)
        for (donor, group, layer), positions in merged.items():
            if not positions:
                continue
            key = (donor, tuple(sorted(positions)))
            if layer is None:
                model.setdefault(key, set()).update(self.members(group))
            else:
                by_layer.setdefault(key, {}).setdefault(layer, set()).update(self.members(group))
        grafts: list[Graft] = []
        for key in sorted(set(by_layer) | set(model), key=lambda k: (self.donors.index(k[0]), k[1])):
            donor, positions = key
            runs: dict[tuple[str, ...], list[int]] = {}
            for layer, comps in sorted(by_layer.get(key, {}).items()):
                runs.setdefault(self._ordered(comps), []).append(layer)
            extra = self._ordered(model.get(key, set()))
            for comps, layers in runs.items():
                spec = "all" if layers == list(range(self.num_layers)) else layers
                grafts.append(Graft(list(positions), spec, [*extra, *comps], donor))
                extra = ()
            if extra:
                grafts.append(Graft(list(positions), "all", list(extra), donor))
        if heads and self.heads is not None:
            grafts += head_grafts(heads, self.layer_groups, self.heads, self.order, self.donors, self.num_layers)
        if experts:
            grafts += expert_grafts(experts, self.donors, self.num_layers)
        return grafts

    def _ordered(self, comps: set[str]) -> tuple[str, ...]:
        return tuple(c for c in self.order if c in comps)
