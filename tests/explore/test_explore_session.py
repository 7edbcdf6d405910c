"""The explorer's session layer without a browser: cells -> Grafts checked against the independent
reference grafter, predictions against the models alone, roles, bounds, the exported Python and
run-config condition, continuations and the attribution grid."""

from __future__ import annotations

import random

import pytest
import torch
import yaml

import tiny_world
from exp_fixtures import RefGraft
from explore_fixtures import DONORS, EVERY_WEIGHT, LLAMA_GROUPS, world
from weightgraft.data.encode import encode_prompt
from weightgraft.experiments.conditions import ConditionSpec, resolve_condition
from weightgraft.experiments.models import load_model
from weightgraft.explore import analyses
from weightgraft.explore.compare import Pin
from weightgraft.explore.explore_error import ExploreError
from weightgraft.explore.grid import Cells, GridError

PROMPT = tiny_world.make_prompts()[2]  # paper_3: FE, R, M and LT all present


def _graft_probs(result) -> torch.Tensor:
    row = next(r for r in result["predictions"] if r["name"] == "graft")
    return torch.tensor([t["prob"] for t in row["top"]]), [t["id"] for t in row["top"]]


def _reference_probs(reference, ids: list[int], cells: list[Cells]) -> torch.Tensor:
    """One reference graft per cell: its position, its layer, its group's components."""
    n = len(ids)
    grafts = []
    for c in cells:
        for p in c.positions:
            mask = [i == p for i in range(n)]
            layers = "all" if c.layer is None else [c.layer]
            grafts.append(RefGraft(mask, layers, LLAMA_GROUPS[c.group], c.donor))
    logits = reference.logits(torch.tensor([ids]), grafts=grafts)[0, -1]
    return torch.softmax(logits.float(), -1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_selections_match_the_reference(session, reference, seed):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    n = len(encoded.input_ids)
    rng = random.Random(seed)
    taken, cells = set(), []
    for column in rng.sample(session.grid.columns, 8):
        positions = tuple(sorted(rng.sample(range(n), rng.randint(1, n))))
        donor = rng.choice(DONORS)
        cells.append(Cells(donor, column.group, column.layer, positions))
        taken |= {(column, p) for p in positions}
    result = session.predict(encoded, cells, top_k=5)
    shown, ids = _graft_probs(result)
    expected = _reference_probs(reference, encoded.input_ids, cells)
    assert torch.allclose(shown, expected[ids], atol=1e-5)
    assert ids == torch.topk(expected, 5).indices.tolist() or torch.allclose(
        shown, torch.topk(expected, 5).values, atol=1e-6
    )  # ties may order differently, never differ in value


def test_baselines_are_the_models_alone(session, root):
    paths, _ = world(root)
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    result = session.predict(encoded, [], top_k=3)
    ids = torch.tensor([encoded.input_ids])
    for row in result["predictions"]:
        name = "pre" if row["name"] in ("recipient", "graft") else row["name"]
        model = load_model(paths[name], "cpu", "float32")
        with torch.no_grad():
            probs = torch.softmax(model(ids).logits[0, -1].float(), -1)
        top = torch.topk(probs, 3)
        assert [t["id"] for t in row["top"]] == top.indices.tolist()
        assert [t["prob"] for t in row["top"]] == pytest.approx(top.values.tolist(), abs=1e-6)
        target = encoded.target_id
        assert row["target"]["rank"] == int((probs > probs[target]).sum()) + 1
        assert row["target"]["prob"] == pytest.approx(float(probs[target]), abs=1e-6)


def test_fe_lt_is_one_graft_of_every_weight(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = encoded.selections["FE+LT"]
    groups = session.grid.component_sets()["WEIGHTS"]
    cells = [Cells("sft", c.group, c.layer, tuple(fe_lt)) for c in session.grid.columns if c.group in groups]
    grafts = session.grafts(encoded, cells)
    assert len(grafts) == 1
    assert list(grafts[0].positions) == fe_lt and grafts[0].layers == "all" and grafts[0].donor == "sft"
    assert sorted(grafts[0].components) == sorted(EVERY_WEIGHT)


def test_roles_come_from_the_dataset_spans(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    enc = encode_prompt(session.tokenizer, PROMPT)
    assert encoded.input_ids == enc.input_ids and encoded.target_id == enc.target_ids[0]
    assert [i for i, r in enumerate(encoded.roles) if r == "FE"] == enc.positions["first_entity"]
    assert [i for i, r in enumerate(encoded.roles) if r == "M"] == enc.positions["movie_title"]
    assert encoded.roles[-1] == "LT"
    assert encoded.selections["FE+LT"] == sorted(enc.positions["first_entity"] + [len(enc.input_ids) - 1])
    # Edited text is free text: no roles, and only LT-based selections.
    free = session.encode(PROMPT.text + " Ada", PROMPT.target, PROMPT.id)
    assert free.roles is None and free.prompt_id is None
    assert set(free.selections) == {"LT", "LT^C", "ALL"}


def test_bad_prompts_and_cells_are_refused_with_a_message(session):
    with pytest.raises(ExploreError, match="empty"):
        session.encode("   ")
    with pytest.raises(ExploreError, match="unknown dataset prompt"):
        session.encode("Ada", "", "no-such-id")
    with pytest.raises(ExploreError, match="at most"):
        session.encode(" ".join(["Ada"] * 200))
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    n = len(encoded.input_ids)
    bad = {
        "unknown donor": Cells("nobody", "O", 0, (1,)),
        "unknown component group": Cells("sft", "XYZ", 0, (1,)),
        "needs a layer": Cells("sft", "O", 99, (1,)),
        "has no layers": Cells("sft", "EMB", 0, (1,)),
        "outside the prompt": Cells("sft", "O", 0, (n,)),
    }
    for message, cells in bad.items():
        with pytest.raises(GridError, match=message):
            session.predict(encoded, [cells])
    with pytest.raises(GridError, match="two donors"):
        session.predict(encoded, [Cells("sft", "O", 1, (2,)), Cells("task", "O", 1, (2, 3))])
    with pytest.raises(ExploreError, match="top_k"):
        session.predict(encoded, [], top_k=0)


def test_the_python_reproduces_the_numbers(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    cells = [Cells("sft", "FFN", 3, (7,)), Cells("task", "ATTN", 1, (1, 2)), Cells("sft", "EMB", None, (1, 2))]
    result = session.predict(encoded, cells, top_k=5)
    scope: dict = {}
    exec(result["python"], scope)  # noqa: S102 - the code the page shows, run as a user would
    shown, ids = _graft_probs(result)
    assert torch.allclose(scope["probs"][ids], shown, atol=1e-6)


def test_the_condition_is_a_valid_run_config_condition(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = tuple(encoded.selections["FE+LT"])
    cells = [Cells("sft", "O", 3, fe_lt), Cells("sft", "FFN", 3, fe_lt), Cells("task", "EMB", None, (0, 4))]
    result = session.predict(encoded, cells)
    [spec] = yaml.safe_load(result["condition"])
    condition = resolve_condition(ConditionSpec.model_validate(spec), recipient="pre", donor="sft")
    roles = encode_prompt(session.tokenizer, PROMPT).positions
    got = {
        (tuple(g.positions.evaluate(roles, len(encoded.input_ids))), str(g.layers), tuple(g.components), g.donor)
        for g in condition.grafts
    }
    assert got == {(fe_lt, "[3]", ("o", "gate", "up", "down"), "sft"), ((0, 4), "all", ("embed",), "task")}
    # Positions that are no union of roles have no condition, and the note says so.
    partial = session.predict(encoded, [Cells("sft", "O", 0, (1,))])  # half of FE
    assert partial["condition"] is None and "not a union" in partial["condition_note"]


def test_continuations(session, reference):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    out = session.generate(encoded, [], max_new_tokens=4)
    by_name = {c["name"]: c["text"] for c in out["continuations"]}
    assert list(by_name) == ["recipient", *DONORS, "graft"]
    ids = list(encoded.input_ids)
    for _ in range(4):  # greedy decoding of the recipient alone, step by step
        ids.append(int(reference.logits(torch.tensor([ids]))[0, -1].argmax()))
    assert by_name["recipient"] == session.tokenizer.decode(ids[len(encoded.input_ids) :])
    assert by_name["graft"] == by_name["recipient"]  # nothing grafted
    with pytest.raises(ExploreError, match="max_new_tokens"):
        session.generate(encoded, [], max_new_tokens=0)


def test_attribution_grid_sums_the_cells(session):
    from weightgraft.attribution.attribute import attribute

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    out = session.attribute(encoded, "task")
    values = torch.tensor(out["values"])
    assert values.shape == (len(encoded.input_ids), len(session.grid.columns))
    direct = attribute(session.grafter, torch.tensor([encoded.input_ids]), [encoded.target_id], donor="task")
    assert float(values.sum()) == pytest.approx(float(direct.total[0]), abs=1e-4)
    column = next(i for i, c in enumerate(session.grid.columns) if c.group == "FFN" and c.layer == 2)
    ffn = [direct.layer_components.index(c) for c in ("gate", "up", "down")]
    assert values[:, column].tolist() == pytest.approx(direct.cells[0, :, 2, ffn].sum(-1).tolist(), abs=1e-5)
    with pytest.raises(ExploreError, match="target"):
        session.attribute(session.encode("Ada Brook stars"), "task")


def test_slow_requests_take_the_model_lock_a_pass_at_a_time(session, monkeypatch):
    """An integrated attribution (8 steps) and the continuations (one per model) take the model
    lock once per pass, so that a click waits for one pass, not the whole request; the numbers
    are those of the library's own calls; an older request stops once a newer one of its kind came."""
    from weightgraft.attribution.attribute import attribute

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    entered = []
    running = session.running

    def counting():
        entered.append(1)
        return running()

    monkeypatch.setattr(session, "running", counting)
    out = session.attribute(encoded, "task", method="integrated")
    assert len(entered) == 8 + 1  # the eight steps, then the recipient's and the donor's metric
    ids = torch.tensor([encoded.input_ids])
    direct = attribute(session.grafter, ids, [encoded.target_id], method="integrated", steps=8, donor="task")
    assert float(torch.tensor(out["values"]).sum()) == pytest.approx(float(direct.total[0]), abs=1e-4)
    entered.clear()
    cells = [Cells("sft", "O", 3, (len(encoded.input_ids) - 1,))]
    texts = {c["name"]: c["text"] for c in session.generate(encoded, cells, max_new_tokens=3)["continuations"]}
    assert len(entered) == 1 + len(DONORS) + 1
    grafts = session.grafts(encoded, cells)
    made = session.grafter.generate(  # the default: generated tokens grafted as the last token
        ids, grafts=grafts, generated="last", max_new_tokens=3, do_sample=False, eos_token_id=session._eos()
    )
    assert texts["graft"] == session._decode_new(made[0, ids.shape[1] :])
    for kind in ("attribute", "generate"):
        older = session.latest_only(kind)
        session.latest_only(kind)
        with pytest.raises(ExploreError, match="replaced by a newer"):
            with older():
                pass


def test_a_click_with_a_target_runs_one_grafted_pass_for_predictions_and_comparison(session, monkeypatch):
    """The prediction's logits are the first target step's of the comparison's row (a position
    sees only what comes before it), so one grafted pass serves both: on a real model a pass is
    most of a click's time. The comparison's current column equals a pass of its own."""
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    n = len(encoded.input_ids)
    column = session.grid.columns[-1]
    cells = [Cells(DONORS[0], column.group, column.layer, (n - 1,))]
    session.predict(encoded, [], top_k=5)  # opening the prompt: the models alone, cached once
    session.compare(encoded, [], ())
    passes = []
    for name in ("logits", "last_logits"):
        real = getattr(session.grafter, name)
        monkeypatch.setattr(
            session.grafter, name, lambda *a, _real=real, _name=name, **k: passes.append(_name) or _real(*a, **k)
        )
    predicted = session.predict(encoded, cells, top_k=5)
    compared = session.compare(encoded, cells, ())
    assert passes == ["logits"]
    monkeypatch.undo()
    alone = session.grafter.last_logits(torch.tensor([encoded.input_ids]), grafts=session.grafts(encoded, cells))[0]
    probs = torch.softmax(alone.float(), -1)
    shown, ids = _graft_probs(predicted)
    assert torch.allclose(shown, probs[ids], atol=1e-6)
    current = next(c for c in compared["columns"] if c["kind"] == "current")
    assert current["prob"] == pytest.approx(float(probs[encoded.target_id]), abs=1e-6)


def test_recovery_needs_a_donor_gain_of_a_percentage_point():
    """On one prompt, a donor that raises p by 1e-4 would make a graft's change look like
    thousands of times the donor's; below MIN_GAIN the comparison shows no recovery."""
    from weightgraft.explore.compare import MIN_GAIN, with_changes

    def column(p: float) -> dict:
        return {"prob": p, "logprob": 0.0, "target_logprob": 0.0}

    sources = [set(), {"tiny"}, {"big"}, {"tiny", "big"}]
    columns = with_changes(
        [column(0.001), column(0.001 + MIN_GAIN / 10), column(0.5), column(0.3)], ["tiny", "big"], sources
    )
    assert columns[3]["recovery"]["tiny"] is None
    assert columns[1]["recovery"]["big"] is None  # a column from "tiny" recovers none of big's gain
    assert columns[3]["recovery"]["big"] == pytest.approx((0.3 - 0.001) / (0.5 - 0.001))
    assert columns[2]["recovery"]["big"] == pytest.approx(1.0) and columns[0]["recovery"]["big"] is None


def test_recovery_is_shown_only_for_the_donor_the_graft_is_from(session):
    """Before: a graft from sft showed a "recovery of task's gain" (the issue's 1.75 of b2a's)."""
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    n = len(encoded.input_ids)
    pins = [Pin("from task", (Cells("task", "FFN", 3, (n - 1,)),))]
    compared = session.compare(encoded, [Cells("sft", "FFN", 3, (n - 1,))], pins)
    by_name = {c["name"]: c["recovery"] for c in compared["columns"]}
    assert by_name["current graft"]["task"] is None and by_name["from task"]["sft"] is None
    assert by_name["sft"]["task"] is None and by_name["task"]["sft"] is None
    assert all(v is None for v in by_name["recipient"].values())
    base, sft = (next(c["prob"] for c in compared["columns"] if c["name"] == k) for k in ("recipient", "sft"))
    current = next(c["prob"] for c in compared["columns"] if c["name"] == "current graft")
    if sft - base >= 0.01:
        assert by_name["current graft"]["sft"] == pytest.approx((current - base) / (sft - base))
    many = analyses.many_prompts(session, encoded, [Cells("sft", "FFN", 3, (n - 1,))], count=20)
    assert list(many["columns"][-1]["recovery"]) == ["sft"]
