"""The report's figures repeat byte for byte: the same figure saved twice writes the same PNG and
SVG (matplotlib's SVG ids are random and it stamps a date unless told otherwise)."""

from __future__ import annotations

import matplotlib.pyplot as plt

from weightgraft.reporting.figure_files import save_figure


def _figure():
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1, 2], [0.1, 0.9, 0.4], marker="o", label="FE+LT")
    ax.set_xlim(0, 1.5)  # clips the line: the SVG gets a clip path, whose id was random
    ax.legend()
    return fig


def test_the_same_figure_saved_twice_writes_the_same_bytes(tmp_path):
    first = save_figure(_figure(), tmp_path / "a" / "plot")
    second = save_figure(_figure(), tmp_path / "b" / "plot")
    assert [p.suffix for p in first] == [".png", ".svg"]
    for one, two in zip(first, second, strict=True):
        assert one.read_bytes() == two.read_bytes(), f"{one.name} differs between two saves"
    svg = first[1].read_text()
    assert "clip-path=" in svg and "<dc:date>" not in svg
