"""Plots of grafts finer than a component, drawn from `finer`'s objects (so what is drawn is what
the report's tables write): a layer x head map of the effect against the recipient alone with
each cell's 95% interval written in it and the complement's cost beside it; the rank curve
(x: rank on a log2 axis, "full" last) and the dose-response curve (x: lambda), each with
interval bands, the references as horizontal lines and the random controls as their own
markers. weightgraft's extension of the paper, not a figure of the paper."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from weightgraft.experiments.record import ExperimentRecord  # noqa: E402
from weightgraft.experiments.vocabulary import DECISION_METRICS, METRIC_WORDS  # noqa: E402
from weightgraft.reporting.figure_files import save_figure  # noqa: E402
from weightgraft.reporting.finer import Curve, HeadMap  # noqa: E402
from weightgraft.reporting.finer_findings import FinerFindings  # noqa: E402

REF_STYLES = {"recipient": ":", "donor": "--", "component": "-."}


def _cell_text(value: float, low: float, high: float, digits: int) -> str:
    if value != value:
        return "n/a"
    if low != low or high != high:
        return f"{value:+.{digits}f}"
    return f"{value:+.{digits}f}\n[{low:+.{digits}f}, {high:+.{digits}f}]"


def _panel(ax, grid: HeadMap, values, lows, highs, title: str) -> None:
    """One heatmap panel: layers (rows) x heads (columns), the value and interval in each cell.
    The colour scale spans the intervals too, so an effect well inside its interval looks pale."""
    finite = [abs(v) for table in (values, lows, highs) for row in table for v in row if v == v]
    span = max(finite, default=1.0) or 1.0
    digits = 3 if span < 0.05 else 2
    image = ax.imshow(values, cmap="RdBu_r", vmin=-span, vmax=span, aspect="auto")
    size = 7 if len(grid.heads) <= 8 else 5
    for i in range(len(grid.layers)):
        for j in range(len(grid.heads)):
            text = _cell_text(values[i][j], lows[i][j], highs[i][j], digits)
            ax.text(j, i, text, ha="center", va="center", fontsize=size)
    ax.set_xticks(range(len(grid.heads)), [f"h{h}" for h in grid.heads], fontsize=8)
    ax.set_yticks(range(len(grid.layers)), [f"L{layer}" for layer in grid.layers], fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.figure.colorbar(image, ax=ax, shrink=0.8)


def head_figure(grid: HeadMap, title: str) -> Figure:
    """Effect on top-5 and on probability against the recipient alone, then the complement's
    cost on top-5 (every head of the layer minus its complement, `HeadMap.cost`): side by side for a few
    heads, one above the other for many."""
    panels = len(DECISION_METRICS) + 1
    width = 1.2 + 0.9 * len(grid.heads)
    height = 1.2 + 0.6 * len(grid.layers)
    stacked = len(grid.heads) > 8
    shape = (panels, 1) if stacked else (1, panels)
    size = (1.0 + width, panels * height + 0.6) if stacked else (1.0 + panels * width, height + 0.6)
    fig, axes = plt.subplots(*shape, figsize=size, squeeze=False)
    axes = axes.reshape(-1)
    for ax, metric in zip(axes, DECISION_METRICS):
        _panel(
            ax,
            grid,
            grid.effect(metric),
            grid.effect(metric, "low"),
            grid.effect(metric, "high"),
            f"{METRIC_WORDS[metric]} - recipient alone",
        )
    _panel(
        axes[-1],
        grid,
        grid.cost("top5"),
        grid.cost("top5", "low"),
        grid.cost("top5", "high"),
        "complement's cost, top-5 (whole layer - complement)",
    )
    fig.suptitle(f"{title}: {grid.components} per head (weightgraft's extension)", fontsize=10)
    fig.tight_layout()
    return fig


def _x_positions(curve: Curve) -> list[float]:
    """Where each point sits: log2(rank) with "full" one step past the largest rank; lambda as is."""
    if curve.kind == "scale":
        return [float(x) for x in curve.xs]
    numbers = [math.log2(x) for x in curve.xs if x != "full"]
    last = (max(numbers) + 1) if numbers else 0.0
    return [last if x == "full" else math.log2(x) for x in curve.xs]


def _draw_curve(ax, curve: Curve, metric: str) -> None:
    """The series with its band, its random controls as markers, the references as lines."""
    xs = _x_positions(curve)
    ax.plot(xs, curve.ys(metric), marker="o", color="C0", label=curve.series)
    ax.fill_between(xs, curve.ys(metric, "low"), curve.ys(metric, "high"), color="C0", alpha=0.2, linewidth=0)
    controls = [(x, r[metric].value) for x, p in zip(xs, curve.points) for r in p.random if r[metric].defined]
    if controls:
        ax.scatter(
            [c[0] for c in controls], [c[1] for c in controls], marker="x", color="C3", zorder=3, label="random control"
        )
    for role, values in curve.refs.items():
        ref = values[metric]
        if ref.defined:
            ax.axhline(ref.value, linestyle=REF_STYLES.get(role, "-"), color="gray", linewidth=1)
            ax.text(xs[-1], ref.value, f" {ref.condition}", va="center", fontsize=7)
    if curve.kind == "rank":
        ax.set_xticks(xs, [str(x) for x in curve.xs])
        ax.set_xlabel("rank of the change (log2 axis)")
    else:
        ax.set_xlabel("lambda: recipient + lambda x (donor - recipient)")
    ax.set_ylabel(METRIC_WORDS[metric])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def curve_figure(curve: Curve, title: str) -> Figure:
    """The curve on top-5 and on probability, side by side."""
    fig, axes = plt.subplots(1, len(DECISION_METRICS), figsize=(10, 3.8), squeeze=False)
    for ax, metric in zip(axes[0], DECISION_METRICS):
        _draw_curve(ax, curve, metric)
    what = "by rank" if curve.kind == "rank" else "dose-response"
    fig.suptitle(f"{title}: {curve.series} {what} (weightgraft's extension)", fontsize=10)
    fig.tight_layout()
    return fig


def finer_plots(findings: FinerFindings, record: ExperimentRecord, folder: Path) -> list[Path]:
    """Every finer plot of one experiment (none when it has no finer rows)."""
    name, title = record.name, record.title
    paths: list[Path] = []
    for i, found in enumerate(findings.heads):
        paths += save_figure(head_figure(found.grid, title), folder / f"{name}_heads{'' if i == 0 else f'_{i}'}")
    for judged, stem in ((findings.ranks, "rank"), (findings.doses, "dose")):
        for i, found in enumerate(judged):
            paths += save_figure(curve_figure(found.curve, title), folder / f"{name}_{stem}{'' if i == 0 else f'_{i}'}")
    return paths
