"""How the report's figures reach the disk: PNG for the markdown, SVG for print, each atomic."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from weightgraft.atomic import write_atomic  # noqa: E402


def save_figure(fig: Figure, stem: Path) -> list[Path]:
    """The figure as `stem`.png and `stem`.svg, each written atomically; the figure is closed."""
    paths = []
    for ext in ("png", "svg"):
        path = stem.with_suffix(f".{ext}")
        write_atomic(path, lambda tmp, ext=ext: fig.savefig(tmp, format=ext, dpi=100))
        paths.append(path)
    plt.close(fig)
    return paths
