"""The one JSON codec (`weightgraft.codec`) on the typed state: every state dataclass round-trips
through it, and a known record dumps to the body the hand-written serialisers wrote (the literal
below is that body, key for key and in its order, written out by hand, not by the code under test)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from weightgraft import codec
from weightgraft.experiments.condition_kind import HeadCell
from weightgraft.experiments.conditions import ConditionMethod, ShapeSpec
from weightgraft.experiments.plan.types import PlannedModel
from weightgraft.experiments.record import ConditionRecord, ExperimentRecord, GraftRecord, MergedPlan

WHOLE = GraftRecord("FE+LT", "last_half", ("q", "k", "v"), "sft", layer_indices=(2, 3))
FINER = GraftRecord(
    "LT",
    [1, 2],
    ("o",),
    "sft",
    heads=(0, 3),
    neurons=(5,),
    shape={"scale": 0.5, "rank": 4},
    random_positions={"seed": 7, "draw": 2},
    layer_indices=(1, 2),
)
HEAD = ConditionRecord(
    "L1H0",
    "pre",
    "sft",
    ConditionMethod.WEIGHTS,
    "head 0 of layer 1",
    {"grain": "head", "layer": 1, "head": 0, "of": None},
    (FINER,),
    "l1h0.parquet",
    fidelity="authors",
)
PLAIN = ConditionRecord("SFT", "pre", "sft", ConditionMethod.ACTIVATIONS, "", {}, (WHOLE,), "sft.parquet")
RECORD = ExperimentRecord(
    name="rec",
    title="Record test",
    description="",
    dataset="relation",
    recipient="pre",
    donor="sft",
    headline=("top5", "prob"),
    plot="bars",
    num_layers=4,
    conditions=(PLAIN, HEAD),
    examples=("e1", "e3"),
    available_examples=9,
    templates=("t1",),
    result_sha256={"sft.parquet": "ab12"},
    tied_embeddings=False,
)
SHARD = replace(
    RECORD,
    fidelity="both",
    wording="authors",
    tied_embeddings=None,
    scored_after_whitespace={"e1": "space"},
    scored_units={"e3": 2},
    shard=(1, 3),
    merged=MergedPlan(("e1", "e2", "e3"), {"SFT": "f00d"}, "d1g"),
)
MODEL = PlannedModel(
    "sft", "/m/sft", "5ha", 4, 64, ("q", "k", "v", "o"), True, "llama", {"o": ["heads", "in", 4, 8]}, {"o": [32, 32]}
)
STATE = [WHOLE, FINER, HEAD, PLAIN, RECORD, SHARD, MergedPlan(("e1",), {}), SHARD.merged, MODEL]

# What the hand-written `ExperimentRecord.to_json` wrote for RECORD: no fidelity on PLAIN, no
# optional graft fields on WHOLE, tied_embeddings after wording, none of the shard's keys.
RECORD_BODY = {
    "name": "rec",
    "title": "Record test",
    "description": "",
    "dataset": "relation",
    "recipient": "pre",
    "donor": "sft",
    "headline": ["top5", "prob"],
    "plot": "bars",
    "num_layers": 4,
    "fidelity": "",
    "wording": "clean",
    "tied_embeddings": False,
    "conditions": [
        {
            "name": "SFT",
            "recipient": "pre",
            "donor": "sft",
            "method": "activations",
            "description": "",
            "meta": {},
            "grafts": [
                {
                    "positions": "FE+LT",
                    "layers": "last_half",
                    "components": ["q", "k", "v"],
                    "donor": "sft",
                    "layer_indices": [2, 3],
                }
            ],
            "file": "sft.parquet",
        },
        {
            "name": "L1H0",
            "recipient": "pre",
            "donor": "sft",
            "method": "weights",
            "description": "head 0 of layer 1",
            "meta": {"grain": "head", "layer": 1, "head": 0, "of": None},
            "grafts": [
                {
                    "positions": "LT",
                    "layers": [1, 2],
                    "components": ["o"],
                    "donor": "sft",
                    "heads": [0, 3],
                    "neurons": [5],
                    "shape": {"scale": 0.5, "rank": 4},
                    "random_positions": {"seed": 7, "draw": 2},
                    "layer_indices": [1, 2],
                }
            ],
            "fidelity": "authors",
            "file": "l1h0.parquet",
        },
    ],
    "examples": ["e1", "e3"],
    "available_examples": 9,
    "templates": ["t1"],
    "result_sha256": {"sft.parquet": "ab12"},
}


@pytest.mark.parametrize("obj", STATE, ids=lambda o: type(o).__name__)
def test_every_state_dataclass_round_trips_through_the_codec_and_json_text(obj):
    assert codec.load(type(obj), codec.dump(obj)) == obj
    assert codec.load(type(obj), json.loads(json.dumps(codec.dump(obj)))) == obj
    assert type(obj).from_json(obj.to_json()) == obj


def test_a_known_record_dumps_to_the_old_body_key_for_key_and_in_order():
    assert json.dumps(RECORD.to_json(), indent=2) == json.dumps(RECORD_BODY, indent=2)
    assert RECORD.dumps() == json.dumps(RECORD_BODY, indent=2)


def test_a_shard_record_adds_its_keys_after_the_sha256_in_the_old_order():
    body = SHARD.to_json()
    assert list(body)[-6:] == [
        "templates",
        "result_sha256",
        "scored_after_whitespace",
        "scored_units",
        "shard",
        "merged",
    ]
    assert "tied_embeddings" not in body and (body["fidelity"], body["wording"]) == ("both", "authors")
    assert (body["shard"], body["scored_units"]) == ([1, 3], {"e3": 2})
    assert body["merged"] == {"examples": ["e1", "e2", "e3"], "fingerprints": {"SFT": "f00d"}, "plan": "d1g"}
    assert MergedPlan(("e1",), {}).to_json() == {"examples": ["e1"], "fingerprints": {}}


def test_the_planned_model_writes_every_field_in_declared_order():
    assert MODEL.to_json() == {
        "key": "sft",
        "path": "/m/sft",
        "sha256": "5ha",
        "num_layers": 4,
        "vocab_size": 64,
        "components": ["q", "k", "v", "o"],
        "tied": True,
        "model_type": "llama",
        "units": {"o": ["heads", "in", 4, 8]},
        "matrices": {"o": [32, 32]},
    }
    assert list(MODEL.to_json()) == ["key", "path", "sha256", "num_layers", "vocab_size", "components", "tied"] + [
        "model_type",
        "units",
        "matrices",
    ]
    assert PlannedModel.from_json(MODEL.to_json()) == MODEL


def test_an_old_body_without_the_later_keys_reads_with_their_defaults():
    body = json.loads(json.dumps(RECORD_BODY))
    for key in ("fidelity", "wording", "tied_embeddings", "available_examples", "result_sha256"):
        body.pop(key)
    body["conditions"][0]["grafts"][0].pop("layer_indices")
    old = ExperimentRecord.from_json(body)
    assert (old.fidelity, old.wording, old.tied_embeddings, old.available_examples) == ("", "clean", None, 0)
    assert old.result_sha256 == {} and old.conditions[0].grafts[0].layer_indices is None
    assert old.conditions[1].grafts[0].heads == (0, 3) and old.headline == ("top5", "prob")


def test_the_condition_kind_is_recomputed_on_reading_and_never_written():
    again = ConditionRecord.from_json(HEAD.to_json())
    assert again.kind == HeadCell(1, 0) and "kind" not in HEAD.to_json()


def test_a_body_missing_a_required_key_is_refused_naming_it():
    body = dict(RECORD_BODY)
    body.pop("num_layers")
    with pytest.raises(ValueError, match="num_layers"):
        ExperimentRecord.from_json(body)


@pytest.mark.parametrize(
    ("fields", "body"),
    [({}, {}), ({"scale": 2}, {"scale": 2.0}), ({"rank": 4, "scale": 1}, {"rank": 4}), ({"top": 0.1}, {"top": 0.1})],
)
def test_a_shape_writes_only_what_differs_from_the_donor(fields, body):
    assert json.dumps(ShapeSpec(**fields).to_json()) == json.dumps(body)
