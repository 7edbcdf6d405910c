"""The demo's report says what the built-in organism can show, and only for the built-in models."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from weightgraft.paper.organism import ORGANISM_LINES, with_organism
from weightgraft.paper.study import PAPER
from weightgraft.pipelines import demo
from weightgraft.training import builtin


def test_the_organism_section_comes_before_the_papers_deviations():
    lines = with_organism(PAPER).deviations()
    assert lines[: len(ORGANISM_LINES)] == ORGANISM_LINES
    assert lines[len(ORGANISM_LINES) :] == PAPER.deviations()
    assert with_organism(PAPER).asked == PAPER.asked  # the claims are the paper's, unchanged


@pytest.mark.parametrize(
    ("size", "options", "expected"),
    [("default", {}, True), ("tiny", {}, False), ("default", {"donor": "/my/model"}, False)],
)
def test_the_demo_adds_it_for_the_default_built_in_models_only(tmp_path, monkeypatch, size, options, expected):
    seen = {}
    monkeypatch.setattr(builtin, "ensure_builtin", lambda **kwargs: SimpleNamespace())
    monkeypatch.setattr(demo, "demo_config", lambda artifacts, **kwargs: "config")

    def fake_run_all(config, out, *, progress, study):
        seen["study"] = study
        return SimpleNamespace(checks=[])

    monkeypatch.setattr(demo, "run_all", fake_run_all)
    demo.run_demo(tmp_path / "demo", size=size, progress=False, **options)
    has_section = seen["study"].deviations()[: len(ORGANISM_LINES)] == ORGANISM_LINES
    assert has_section is expected
