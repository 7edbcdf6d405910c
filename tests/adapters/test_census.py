"""The census of every decoder-only causal-LM type (tests/support/census.py) against what
docs/architectures.md records: no type may get worse, and none may be wrong or crash."""

from __future__ import annotations

import pytest

from census import DOC, STATUS_ORDER, read_doc, run_census


@pytest.fixture(scope="module")
def census():
    return {entry.model_type: entry for entry in run_census()}


def test_no_type_is_worse_than_docs_architectures_md(census):
    recorded = read_doc(DOC)
    assert recorded, f"{DOC} lists no types; regenerate it with `.venv/bin/python tests/support/census.py`"
    worse = [
        f"{t}: {recorded[t]} -> {census[t].status} ({census[t].reason})"
        for t in recorded
        if t in census and STATUS_ORDER[census[t].status] > STATUS_ORDER[recorded[t]]
    ]
    assert not worse, "types got worse than docs/architectures.md records:\n" + "\n".join(worse)


def test_every_decoder_type_is_grafted_exactly_or_refused_with_its_reason(census):
    bad = [f"{e.model_type}: {e.status}: {e.reason}" for e in census.values() if e.status in ("wrong", "error")]
    assert not bad, "\n".join(bad)
    refused = [e for e in census.values() if e.status == "refused"]
    assert all(e.reason and "\n" not in e.reason for e in refused)


def test_the_registered_architectures_are_exact(census):
    from weightgraft.adapters import supported_model_types

    for model_type in supported_model_types():
        if model_type in census:
            assert census[model_type].status == "exact", census[model_type]
            assert census[model_type].adapter == "registered"
