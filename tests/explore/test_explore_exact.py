"""The explorer's exact effect map against the independent reference grafter: every single-cell
effect it runs, the cells it does not run (known to be 0), each cell left out of a graft, the
first-order map's error, and the endpoint over a real socket."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request

import pytest
import torch

import tiny_world
from exp_fixtures import RefGraft
from explore_fixtures import DONORS, LLAMA_GROUPS, open_world_session
from weightgraft.explore import analyses
from weightgraft.explore.explore_error import ExploreError
from weightgraft.explore.grid import Cells
from weightgraft.explore.server import ServerThread

PROMPT = tiny_world.make_prompts()[2]  # paper_3: FE, R, M and LT all present


def _reference_logprob(reference, ids: list[int], target: int, cells: list[tuple[str, str, int | None, int]]) -> float:
    """The target's log-probability with each (donor, group, layer, position) grafted by the reference."""
    n = len(ids)
    grafts = [
        RefGraft([i == p for i in range(n)], "all" if layer is None else [layer], LLAMA_GROUPS[group], donor)
        for donor, group, layer, p in cells
    ]
    logits = reference.logits(torch.tensor([ids]), grafts=grafts)[0, -1]
    return float(torch.log_softmax(logits.float(), -1)[target])


@pytest.mark.parametrize("donor", DONORS)
def test_every_single_cell_effect_equals_the_reference(session, reference, donor):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    ids, target = encoded.input_ids, encoded.target_id
    out = analyses.exact_map(session, encoded, donor)
    values, ran = torch.tensor(out["values"]), torch.tensor(out["ran"])
    n, columns = len(ids), session.grid.columns
    assert values.shape == (n, len(columns)) and out["rows"] == int(ran.sum()) + 1
    base = _reference_logprob(reference, ids, target, [])
    cells = [(p, j) for p in range(n) for j in range(len(columns))]
    for p, j in random.Random(donor).sample(cells, 40) + [(n - 1, len(columns) - 1)]:
        column = columns[j]
        expected = _reference_logprob(reference, ids, target, [(donor, column.group, column.layer, p)]) - base
        assert float(values[p, j]) == pytest.approx(expected, abs=2e-5), (p, column)
        if not ran[p, j]:  # skipped: an identical column, or the head away from the scored position
            assert expected == pytest.approx(0.0, abs=1e-6) and float(values[p, j]) == 0.0
    assert bool(ran.any()) and not bool(ran.all())
    for group in ("FNORM", "UNEMB"):
        head = next(j for j, c in enumerate(columns) if c.group == group)
        assert not bool(ran[: n - 1, head].any())


def test_leave_one_out_equals_the_reference(session, reference):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    ids, target, n = encoded.input_ids, encoded.target_id, len(encoded.input_ids)
    current = [Cells("sft", "FFN", 1, (1, n - 1)), Cells("task", "O", 3, (n - 1,)), Cells("sft", "EMB", None, (0,))]
    whole_map = analyses.exact_map(session, encoded, "sft", current)
    out = whole_map["leave_one_out"]
    # Every row that ran is counted: the single cells', and the current graft's and one per cell left out.
    assert whole_map["rows"] == int(torch.tensor(whole_map["ran"]).sum()) + 1 + len(out["cells"]) + 1
    effects = [abs(c["effect"]) for c in out["cells"]]
    assert effects == sorted(effects, reverse=True)  # the largest first
    single = [("sft", "FFN", 1, 1), ("sft", "FFN", 1, n - 1), ("task", "O", 3, n - 1), ("sft", "EMB", None, 0)]
    whole = _reference_logprob(reference, ids, target, single)
    assert out["current_logprob"] == pytest.approx(whole, abs=2e-5)
    assert len(out["cells"]) == len(single)
    columns = session.grid.columns
    for cell in out["cells"]:
        column = columns[cell["column"]]
        left = (cell["donor"], column.group, column.layer, cell["position"])
        assert left in single
        rest = [c for c in single if c != left]
        expected = whole - _reference_logprob(reference, ids, target, rest)
        assert cell["effect"] == pytest.approx(expected, abs=2e-5), left


def test_the_first_order_error_is_measured_against_the_exact_map(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    out = analyses.exact_map(session, encoded, "task")
    estimate = torch.tensor(session.attribute(encoded, "task", "gradient")["values"])
    exact, ran = torch.tensor(out["values"]), torch.tensor(out["ran"])
    error = (estimate[ran] - exact[ran]).abs()
    first = out["first_order"]
    assert first["cells"] == int(ran.sum())
    assert first["max_abs_error"] == pytest.approx(float(error.max()), abs=1e-5)
    assert first["mean_abs_error"] == pytest.approx(float(error.mean()), abs=1e-5)
    assert first["correlation"] == pytest.approx(
        float(torch.corrcoef(torch.stack([estimate[ran], exact[ran]]))[0, 1]), abs=1e-4
    )


def test_exact_refuses_what_it_cannot_score(session):
    with pytest.raises(ExploreError, match="target"):
        analyses.exact_map(session, session.encode("Ada Brook stars"), "task")
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    with pytest.raises(ExploreError, match="unknown donor"):
        analyses.exact_map(session, encoded, "nobody")


def test_the_exact_and_lens_endpoints(root):
    session = open_world_session(root)
    server = ServerThread(session)
    url = server.start()
    try:
        prompt = {"text": PROMPT.text, "target": PROMPT.target, "prompt_id": PROMPT.id}
        body = json.dumps({"prompt": prompt, "donor": "sft", "cells": []}).encode()
        request = urllib.request.Request(url + "api/exact", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as response:
            data = json.loads(response.read())
        direct = analyses.exact_map(session, session.encode(PROMPT.text, PROMPT.target, PROMPT.id), "sft")
        assert data["values"] == direct["values"] and data["leave_one_out"] is None
        body = json.dumps({"prompt": prompt, "cells": []}).encode()
        with urllib.request.urlopen(
            urllib.request.Request(url + "api/lens", data=body, method="POST"), timeout=60
        ) as r:
            lens = json.loads(r.read())
        assert lens == analyses.lens(session, session.encode(PROMPT.text, PROMPT.target, PROMPT.id))
        bad = json.dumps({"prompt": prompt, "donor": "nobody"}).encode()
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(url + "api/exact", data=bad, method="POST"), timeout=60)
        assert err.value.code == 400 and "unknown donor" in json.loads(err.value.read())["error"]
    finally:
        server.stop()


def _reference_lens(reference, ids: list[int], target: int, grafts) -> tuple[list[float], float]:
    """Per block, the target's log-probability read from the reference grafter's residual stream
    at the last position through the recipient's plain norm and head; and the row's own output."""
    model = reference.recipient
    kept = {}
    handles = [
        block.register_forward_hook(
            lambda _m, _a, out, i=i: kept.__setitem__(i, (out[0] if isinstance(out, tuple) else out)[0, -1].clone())
        )
        for i, block in enumerate(model.model.layers)
    ]
    try:
        logits = reference.logits(torch.tensor([ids]), grafts=grafts)[0, -1]
    finally:
        for handle in handles:
            handle.remove()
    with torch.no_grad():
        lens = [float(torch.log_softmax(model.lm_head(model.model.norm(kept[i])), -1)[target]) for i in sorted(kept)]
    return lens, float(torch.log_softmax(logits.float(), -1)[target])


def test_the_logit_lens_equals_the_reference(session, reference):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    ids, target, n = encoded.input_ids, encoded.target_id, len(encoded.input_ids)
    current = [Cells("sft", "FFN", 2, (n - 1,)), Cells("task", "O", 1, (1, n - 1))]
    out = analyses.lens(session, encoded, current)
    assert [line["name"] for line in out["lines"]] == ["recipient", *DONORS, "graft"]
    everywhere = lambda d: [RefGraft([True] * n, "all", ["all"], d)]  # noqa: E731
    graft_cells = [("sft", "FFN", 2, n - 1), ("task", "O", 1, 1), ("task", "O", 1, n - 1)]
    ref_grafts = [
        RefGraft([i == p for i in range(n)], [layer], LLAMA_GROUPS[group], donor)
        for donor, group, layer, p in graft_cells
    ]
    for line, grafts in zip(out["lines"], [[], everywhere("sft"), everywhere("task"), ref_grafts]):
        lens, output = _reference_lens(reference, ids, target, grafts)
        assert len(line["logprob"]) == len(lens) == session.grid.num_layers
        assert line["logprob"] == pytest.approx(lens, abs=2e-5), line["name"]
        assert line["output_logprob"] == pytest.approx(output, abs=2e-5), line["name"]
        assert all(r >= 1 for r in line["rank"])
    recipient = out["lines"][0]
    assert recipient["logprob"][-1] == pytest.approx(recipient["output_logprob"], abs=1e-5)
    assert out["lines"][3]["logprob"] != out["lines"][0]["logprob"]  # the graft moves the stream
    with pytest.raises(ExploreError, match="target"):
        analyses.lens(session, session.encode("Ada Brook stars"))


def test_a_long_map_takes_the_model_lock_per_pass_and_gives_way_to_a_newer_one(session, monkeypatch):
    """Clicks wait for one pass of the map, not the whole map; an older map request stops once a
    newer one has come (the page shows only the newest)."""
    import math

    import weightgraft.explore.effects as effects

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    whole = analyses.exact_map(session, encoded, "task")
    monkeypatch.setattr(effects, "ROWS_PER_PASS", 8)
    entered = []
    running = session.running

    def counting():
        entered.append(1)
        return running()

    monkeypatch.setattr(session, "running", counting)
    again = analyses.exact_map(session, encoded, "task")
    for row, expected in zip(again["values"], whole["values"]):  # other batches: float round-off
        assert row == pytest.approx(expected, abs=1e-5)
    passes = math.ceil(again["rows"] / 8)
    attribution = 2  # the first-order map: its gradient pass, then the donor-everywhere pass
    assert len(entered) == passes + attribution
    older = session.latest_only("exact")
    session.latest_only("exact")  # a newer request of the same kind
    with pytest.raises(ExploreError, match="replaced by a newer"):
        with older():
            pass
