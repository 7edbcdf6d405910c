"""Plots of a run, as PNG and SVG: bar charts in the conditions' order (the paper's), paired bars
for weight grafting vs activation patching, heatmaps for layer sweeps, and the finer grafts'
head maps, rank and dose curves (`finer_plots`). Values are over all
templates (`ALL`), error bars are the 95% intervals over facts."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from weightgraft.experiments.condition_kind import Plain, SweepCell  # noqa: E402
from weightgraft.experiments.record import ExperimentRecord  # noqa: E402
from weightgraft.reporting.figure_files import save_figure  # noqa: E402
from weightgraft.reporting.finer_findings import FinerFindings  # noqa: E402
from weightgraft.reporting.finer_plots import finer_plots  # noqa: E402
from weightgraft.reporting.summary import SummaryRow, by_condition  # noqa: E402


def _bars(ax, xs, rows, width, label, color):
    """One bar series in a single call (one artist per series keeps drawing fast); n/a rows get
    a marker text instead of a bar."""
    keep = [(x, r) for x, r in zip(xs, rows) if r is not None and r.value is not None]
    for x, r in zip(xs, rows):
        if r is None or r.value is None:
            ax.text(x, 0.02, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
    if not keep:
        return
    x = [k[0] for k in keep]
    values = [k[1].value for k in keep]
    err = [[v - k[1].ci_low for v, k in zip(values, keep)], [k[1].ci_high - v for v, k in zip(values, keep)]]
    ax.bar(x, values, width, yerr=err, capsize=2, label=label, color=color, error_kw={"elinewidth": 0.8})


def _finish(fig, ax, labels, title, ylabel):
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.subplots_adjust(bottom=0.32, top=0.9, left=0.08, right=0.97)


def bar_chart(summary: list[SummaryRow], record: ExperimentRecord, stem: Path) -> list[Path]:
    """Grouped bars: one group per condition, one bar per headline metric."""
    table = by_condition(summary, record.name)
    names = [c.name for c in record.conditions if isinstance(c.kind, Plain)]
    metrics = record.headline
    width = 0.8 / len(metrics)
    fig, ax = plt.subplots(figsize=(max(6, 0.55 * len(names) + 2), 4.2))
    for m, metric in enumerate(metrics):
        xs = [i + (m - (len(metrics) - 1) / 2) * width for i in range(len(names))]
        _bars(ax, xs, [table.get((n, metric)) for n in names], width, metric, f"C{m}")
    _finish(fig, ax, names, record.title, "accuracy")
    return save_figure(fig, stem)


def paired_chart(summary: list[SummaryRow], record: ExperimentRecord, stem: Path) -> list[Path]:
    """Weight grafting vs activation patching at the same positions and layers."""
    table = by_condition(summary, record.name)
    metric = record.headline[0]
    pairs = [c.name.removeprefix("graft ") for c in record.conditions if c.name.startswith("graft ")]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(pairs) + 2), 4.2))
    idx = range(len(pairs))
    _bars(ax, [i - 0.2 for i in idx], [table.get((f"graft {w}", metric)) for w in pairs], 0.4, "weight grafting", "C0")
    _bars(
        ax, [i + 0.2 for i in idx], [table.get((f"patch {w}", metric)) for w in pairs], 0.4, "activation patching", "C1"
    )
    for name, style in (("PRE", ":"), ("SFT", "--")):
        row = table.get((name, metric))
        if row and row.value is not None:
            ax.axhline(row.value, linestyle=style, color="gray", linewidth=1)
            ax.text(len(pairs) - 0.5, row.value, f" {name}", va="center", fontsize=8)
    _finish(fig, ax, pairs, record.title, metric)
    return save_figure(fig, stem)


def heatmaps(summary: list[SummaryRow], record: ExperimentRecord, stem: Path) -> list[Path]:
    """One heatmap per swept position: component sets (rows) x layer bands (columns)."""
    table = by_condition(summary, record.name)
    metric = record.headline[0]
    sweep = [(c, c.kind) for c in record.conditions if isinstance(c.kind, SweepCell)]
    positions = list(dict.fromkeys(kind.at for _, kind in sweep))
    fig, axes = plt.subplots(1, len(positions), figsize=(1.5 + 3.6 * len(positions), 3.6), squeeze=False)
    for ax, at in zip(axes[0], positions):
        cells = [(c, kind) for c, kind in sweep if kind.at == at]
        comps = list(dict.fromkeys(kind.components for _, kind in cells))
        bands = list(dict.fromkeys(kind.band for _, kind in cells))
        grid = [[float("nan")] * len(bands) for _ in comps]
        for c, kind in cells:
            row = table.get((c.name, metric))
            if row and row.value is not None:
                grid[comps.index(kind.components)][bands.index(kind.band)] = row.value
        image = ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        for i in range(len(comps)):
            for j in range(len(bands)):
                value = grid[i][j]
                ax.text(
                    j,
                    i,
                    "n/a" if value != value else f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if value < 0.6 else "black",
                )
        ax.set_xticks(range(len(bands)), bands, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(comps)), comps if ax is axes[0][0] else [""] * len(comps), fontsize=8)
        ax.set_title(f"{metric}: band grafted at {at}", fontsize=9)
    fig.subplots_adjust(left=0.16, right=0.88, bottom=0.2, top=0.84, wspace=0.08)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    fig.suptitle(record.title, fontsize=10)
    return save_figure(fig, stem)


def plot_experiment(
    summary: list[SummaryRow], record: ExperimentRecord, findings: FinerFindings, folder: Path
) -> list[Path]:
    stem = folder / record.name
    if record.plot == "paired":
        return paired_chart(summary, record, stem)
    paths = bar_chart(summary, record, stem)
    if any(isinstance(c.kind, SweepCell) for c in record.conditions):
        paths += heatmaps(summary, record, folder / f"{record.name}_heatmap")
    return paths + finer_plots(findings, record, folder)
