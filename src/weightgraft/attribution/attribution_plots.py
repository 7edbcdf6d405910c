"""Pictures of graft attribution: heatmaps per component, the recovery curve, and prompts whose
tokens are coloured by how much their grafts carry."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np
import polars as pl

from weightgraft.adapters.base import PER_LAYER
from weightgraft.attribution.attribute import PAPER_ROLES


def _pyplot():
    """pyplot on the Agg backend, imported only when a picture is drawn: matplotlib is a heavy
    import that `localize` without pictures never needs (`weightgraft explore`, which imports this
    module and draws none, starts 330 ms sooner, measured on a loaded 2-core machine), and the
    backend must be set before pyplot loads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _grid(count: int) -> tuple[int, int]:
    cols = min(4, count)
    return (count + cols - 1) // cols, cols


def role_heatmaps(ranking, path: Path) -> Path:
    """One panel per component: role x layer, coloured by mean attribution per prompt; a last
    panel holds the model-level components (role x component)."""
    plt = _pyplot()
    per_layer = ranking.filter(ranking["layer"].is_not_null())
    model = ranking.filter(ranking["layer"].is_null())
    roles = [r for r in PAPER_ROLES if r in set(ranking["role"].to_list())]
    present = set(per_layer["component"].to_list())
    comps = [c for c in PER_LAYER if c in present]
    num_layers = int(per_layer["layer"].max()) + 1 if per_layer.height else 0
    panels = len(comps) + (1 if model.height else 0)
    rows, cols = _grid(panels)
    limit = float(np.abs(ranking["score"].to_numpy()).max()) or 1.0
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.2 * cols, 0.45 * len(roles) * rows + 1.6 * rows), squeeze=False, layout="constrained"
    )
    image = None
    for ax, comp in zip(axes.flat, comps):
        grid = np.zeros((len(roles), num_layers))
        for role, layer, score in (
            per_layer.filter(per_layer["component"] == comp).select(["role", "layer", "score"]).iter_rows()
        ):
            grid[roles.index(role), layer] = score
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_title(comp)
        ax.set_yticks(range(len(roles)), roles)
        ax.set_xticks(range(num_layers))
        ax.set_xlabel("layer")
    if model.height:
        ax = axes.flat[len(comps)]
        present = set(model["component"].to_list())
        model_comps = [c for c in ("embed", "pos_embed", "ln_final", "lm_head") if c in present]
        grid = np.zeros((len(roles), len(model_comps)))
        for role, comp, score in model.select(["role", "component", "score"]).iter_rows():
            grid[roles.index(role), model_comps.index(comp)] = score
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_title("model-level")
        ax.set_yticks(range(len(roles)), roles)
        ax.set_xticks(range(len(model_comps)), model_comps, rotation=45, ha="right")
    for ax in list(axes.flat)[panels:]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attribution (mean per prompt)")
    fig.suptitle("Graft attribution by role x layer, per component")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def position_heatmaps(cells, example_id: str, path: Path) -> Path:
    """One prompt: one panel per component, token x layer."""
    plt = _pyplot()
    one = cells.filter((cells["example_id"] == example_id) & cells["layer"].is_not_null())
    tokens = (
        one.filter((one["layer"] == 0) & (one["component"] == one["component"][0])).sort("position")["token"].to_list()
    )
    present = set(one["component"].to_list())
    comps = [c for c in PER_LAYER if c in present]
    num_layers = int(one["layer"].max()) + 1
    rows, cols = _grid(len(comps))
    limit = float(np.abs(one["effect"].to_numpy()).max()) or 1.0
    fig, axes = plt.subplots(
        rows, cols, figsize=(2.6 * cols, 0.28 * len(tokens) * rows + 1.2 * rows), squeeze=False, layout="constrained"
    )
    image = None
    for ax, comp in zip(axes.flat, comps):
        grid = np.zeros((len(tokens), num_layers))
        for position, layer, effect in (
            one.filter(one["component"] == comp).select(["position", "layer", "effect"]).iter_rows()
        ):
            grid[position, layer] = effect
        image = ax.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_title(comp)
        ax.set_yticks(range(len(tokens)), [repr(t)[1:-1] for t in tokens], fontsize=7)
        ax.set_xticks(range(num_layers))
        ax.set_xlabel("layer")
    for ax in list(axes.flat)[len(comps) :]:
        ax.axis("off")
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attribution")
    fig.suptitle(f"Graft attribution by position x layer: {example_id}")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def recovery_curve(result, path: Path) -> Path:
    """Recovery of the SFT gain against the number of groups grafted: attribution order, random
    order, the paper's FE+LT, and the target."""
    plt = _pyplot()
    ks = [c["k"] for c in result.curve]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True, layout="constrained")
    for ax, metric, label in zip(axes, ("top5", "prob"), ("top-5 accuracy", "target probability")):
        ax.plot(
            ks,
            [c[f"recovery_{metric}"] for c in result.curve],
            marker="o",
            ms=3,
            label=f"attribution order ({result.method})",
        )
        ax.plot(
            ks,
            [c[f"random_recovery_{metric}"] for c in result.curve],
            marker="x",
            ms=3,
            color="grey",
            label="random order",
        )
        fe_lt = result.baselines["FE+LT"][f"recovery_{metric}"]
        ax.axhline(fe_lt, color="tab:green", ls="--", label=f"FE+LT-all ({result.counts['fe_lt_groups']} groups)")
        ax.axhline(result.target, color="tab:red", ls=":", label=f"target {result.target:.0%}")
        if result.reached:
            ax.axvline(len(result.chosen), color="tab:red", alpha=0.3)
        ax.set_xlabel("groups grafted (role x layer x component)")
        ax.set_title(f"recovery of SFT's gain: {label}")
    axes[0].set_ylabel("(set - PRE) / (SFT - PRE)")
    axes[0].legend(fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def token_view(cells, examples, chosen: set, path: Path, max_examples: int = 40) -> Path:
    """HTML: each prompt's tokens on a background coloured by the summed attribution of all its
    cells (red carries the finetuned answer, blue works against it); tokens whose role is in the
    minimal set are underlined."""
    totals = cells.group_by(["example_id", "position"]).agg(pl.col("effect").sum().alias("total"))
    by_key = {(e, p): t for e, p, t in totals.iter_rows()}
    chosen_roles = {role for role, _, _ in chosen}
    shown = examples[:max_examples]
    limit = max((abs(by_key.get((e.id, p), 0.0)) for e in shown for p in range(len(e.tokens))), default=1.0) or 1.0
    lines = []
    for example in shown:
        role_at = {p: role for role, ps in example.roles.items() for p in ps}
        spans = []
        for p, token in enumerate(example.tokens):
            value = by_key.get((example.id, p), 0.0)
            strength = min(1.0, abs(value) / limit)
            colour = f"rgba(214,39,40,{strength:.2f})" if value > 0 else f"rgba(31,119,180,{strength:.2f})"
            role = role_at.get(p, "other")
            underline = "border-bottom:2px solid black;" if role in chosen_roles else ""
            spans.append(
                f'<span title="{html.escape(role)} {value:+.3f}" style="background:{colour};{underline}'
                f'padding:1px 0;white-space:pre">{html.escape(token)}</span>'
            )
        lines.append(
            f"<p><code>{html.escape(example.id)}</code> {''.join(spans)} "
            f"&rarr; <b>{html.escape(example.target)}</b></p>"
        )
    page = (
        "<!doctype html><meta charset='utf-8'><title>weightgraft localize: tokens</title>"
        "<body style='font-family:sans-serif;max-width:1100px'>"
        "<h2>What each token's grafts carry</h2><p>Background: the sum of a token's cell "
        "attributions over every layer and component (red toward the finetuned answer, blue "
        "against it; hover for the role and value). Underlined: roles in the minimal set.</p>"
        + "\n".join(lines)
        + "</body>"
    )
    Path(path).write_text(page, encoding="utf-8")
    return Path(path)
