"""The tutorials of docs/tutorials (issue 39, item 5) run, cell by cell, in a fresh kernel on the
tiny built-in models (each cell within a minute: nbclient's timeout), and are saved with the
outputs of such a run so that they read on GitHub as they run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from training_fixtures import tiny_artifacts, tiny_home

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "docs" / "tutorials").glob("*.ipynb"))
MISSING = [m for m in ("nbclient", "nbformat", "ipykernel") if importlib.util.find_spec(m) is None]


def test_there_are_three_tutorials():
    assert [p.name[:3] for p in NOTEBOOKS] == ["01_", "02_", "03_"]


@pytest.mark.skipif(bool(MISSING), reason=f"{MISSING} not installed (the test extra: pip install -e '.[test]')")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_tutorial_runs_and_is_saved_with_its_outputs(path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    saved = nbformat.read(path, as_version=4)
    code = [cell for cell in saved.cells if cell.cell_type == "code"]
    assert code and all(cell.outputs for cell in code), f"{path.name}: save it with its outputs"
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    tiny_artifacts()  # built once per test process; the kernel finds it through WEIGHTGRAFT_HOME
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tiny_home()))
    fresh = nbformat.read(path, as_version=4)
    NotebookClient(fresh, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    ran = [cell for cell in fresh.cells if cell.cell_type == "code"]
    assert all(cell.outputs for cell in ran)
    assert not [o for cell in ran for o in cell.outputs if o.output_type == "error"]
