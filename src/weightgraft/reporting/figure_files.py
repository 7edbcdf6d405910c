"""How the report's figures reach the disk: PNG for the markdown, SVG for print, each atomic."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from weightgraft.atomic import write_atomic  # noqa: E402

# matplotlib names an SVG's clip paths and markers from random ids and stamps its date, so that two
# runs of the same report differed in every SVG; a fixed salt and no date make the bytes repeat.
SVG_SALT = "weightgraft"
NO_DATE = {"png": {}, "svg": {"Date": None}}


def save_figure(fig: Figure, stem: Path) -> list[Path]:
    """The figure as `stem`.png and `stem`.svg, each written atomically (the same figure, the same
    bytes); the figure is closed."""
    paths = []
    for ext in ("png", "svg"):
        path = stem.with_suffix(f".{ext}")
        with matplotlib.rc_context({"svg.hashsalt": SVG_SALT}):
            write_atomic(path, lambda tmp, ext=ext: fig.savefig(tmp, format=ext, dpi=100, metadata=NO_DATE[ext]))
        paths.append(path)
    plt.close(fig)
    return paths
