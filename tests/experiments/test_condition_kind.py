"""Issue 42: a condition's part in its report (plain, sweep cell, head cell, curve point, control,
reference) is a typed kind read once from its tags, not looked up by key in the report."""

from __future__ import annotations

import pytest

from weightgraft.experiments.condition_kind import Control, CurvePoint, HeadCell, Plain, SweepCell, Tagged, kind_of
from weightgraft.experiments.conditions import ConditionMethod
from weightgraft.experiments.record import ConditionRecord


@pytest.mark.parametrize(
    ("meta", "kind"),
    [
        ({}, Plain()),
        ({"reference": "donor"}, Plain("donor")),
        ({"reference": "component", "components": "O", "layer": 5}, Plain("component", "O", 5)),
        ({"sweep_at": "LT", "band": "first", "components": "O"}, SweepCell("LT", "O", "first")),
        ({"grain": "head", "layer": 6, "head": 3, "components": "O"}, HeadCell(6, 3, "O")),
        ({"shape": "rank", "rank": "full", "series": "O+FFN"}, CurvePoint("rank", "full", "O+FFN")),
        ({"shape": "scale", "scale": 0.5}, CurvePoint("scale", 0.5, "")),
        # a control carries its row's tags, and is a control first
        (
            {"grain": "head", "layer": 6, "head": 3, "control": "random", "of": "L6H3", "draw": 0},
            Control("random", "L6H3"),
        ),
        ({"mine": 1}, Tagged()),
    ],
)
def test_tags_give_one_kind(meta, kind):
    assert kind_of(meta) == kind


def test_a_head_cell_without_its_head_is_refused_naming_the_missing_tag():
    with pytest.raises(ValueError, match=r"needs \['head'\]"):
        kind_of({"grain": "head", "layer": 2})


def test_the_record_computes_its_kind_and_does_not_store_it():
    body = {
        "name": "L1H0",
        "recipient": "pre",
        "donor": "sft",
        "method": ConditionMethod("weights").value,
        "description": "",
        "meta": {"grain": "head", "layer": 1, "head": 0},
        "grafts": [],
        "file": "l1h0.parquet",
    }
    record = ConditionRecord.from_json(body)
    assert record.kind == HeadCell(1, 0) and record.to_json() == body
