"""Single experts in the explorer's grid (issue 38): on a mixture-of-experts model an expert cell of
FFN is the library's `Graft(components="experts", experts=[e])`, the router staying the
recipient's. Checked against that Graft run directly, against the independent per-token reference
grafter, and against the whole FFN cell (every expert with the router is the block; every expert
alone is not); the exact map, the attribution map and the exported Python carry the experts; bad
expert cells get a message naming the fix, over HTTP too."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
import torch

import tiny_world
from explore_fixtures import moe_world, open_moe_session
from reference_grafter import GraftSpec, reference_unit_logits
from tiny_model_fixtures import MOE_ARCHS, make_model, make_pair
from weightgraft import Graft, Grafter
from weightgraft.experiments.models import load_model
from weightgraft.explore import analyses
from weightgraft.explore.grid import Cells, Grid, GridError
from weightgraft.explore.server import ServerThread

PROMPT = tiny_world.make_prompts()[2]  # paper_3: FE, R, M and LT all present
EXPERTS, LAYERS = 4, 3  # tiny_model_fixtures' MoE configs


@pytest.fixture(scope="module")
def session(root):
    return open_moe_session(root)


def _logp(grafter, ids: list[int], target: int, grafts=None) -> float:
    logits = grafter.last_logits(torch.tensor([ids]), grafts=grafts)[0]
    return float(torch.log_softmax(logits.float(), -1)[target])


def _graft_row(result) -> dict:
    return next(r for r in result["predictions"] if r["name"] == "graft")


def test_the_grid_describes_its_experts(session):
    info = session.info()
    assert info["experts"] == {"count": EXPERTS, "groups": {"FFN": EXPERTS}}
    assert info["groups"]["FFN"] == ["router", "experts"]  # Mixtral: no shared expert
    dense = Grid.of(Grafter(make_model("llama", 0), make_model("llama", 1)))
    assert dense.experts is None and dense.describe()["experts"] is None


def test_an_expert_cell_is_the_librarys_graft_and_the_python_runs(session, root):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = tuple(encoded.selections["FE+LT"])
    cells = [Cells("sft", "FFN", 1, fe_lt, expert=2), Cells("sft", "FFN", 2, fe_lt, expert=0)]
    grafts = session.grid.to_grafts(cells)
    direct = [
        Graft(list(fe_lt), [1], ["experts"], "sft", experts=[2]),
        Graft(list(fe_lt), [2], ["experts"], "sft", experts=[0]),
    ]
    assert [repr(g) for g in grafts] == [repr(g) for g in direct]
    result = session.predict(encoded, cells, top_k=5)
    row = _graft_row(result)
    ids = [t["id"] for t in row["top"]]
    shown = torch.tensor([t["prob"] for t in row["top"]])
    logits = session.grafter.last_logits(torch.tensor([encoded.input_ids]), grafts=direct)[0]
    assert torch.allclose(torch.softmax(logits.float(), -1)[ids], shown, atol=1e-6)
    # The independent reference, token by token, on models loaded afresh.
    paths, _ = moe_world(root)
    recipient, donor = load_model(paths["pre"], "cpu", "float32"), load_model(paths["sft"], "cpu", "float32")
    specs = [GraftSpec(list(fe_lt), 1, "experts", experts=[2]), GraftSpec(list(fe_lt), 2, "experts", experts=[0])]
    want = reference_unit_logits(recipient, donor, encoded.input_ids, specs)[-1]
    assert torch.allclose(torch.softmax(want.float(), -1)[ids], shown, atol=1e-5)
    assert (want - session.grafter.last_logits(torch.tensor([encoded.input_ids]))[0]).abs().max() > 1e-3
    python = result["python"]
    assert "experts=[2]" in python and "experts=[0]" in python
    scope: dict = {}
    exec(python, scope)  # noqa: S102 - the code the page shows, run as a user would
    assert torch.allclose(scope["probs"][ids], shown, atol=1e-6)
    assert result["condition"] is None and "single experts" in result["condition_note"]


def test_expert_cells_merge_into_few_grafts(session):
    """Experts of one layer and positions become one Graft, layers with the same experts one Graft;
    an expert of a cell grafted whole adds nothing."""
    cells = [
        Cells("sft", "FFN", 0, (3, 4), expert=1),
        Cells("sft", "FFN", 0, (3, 4), expert=3),
        Cells("sft", "FFN", 2, (3, 4), expert=3),
        Cells("sft", "FFN", 2, (3, 4), expert=1),
        Cells("sft", "O", 1, (3, 4), head=0),
        Cells("sft", "FFN", 1, (5,)),
        Cells("sft", "FFN", 1, (5,), expert=2),
    ]
    assert [repr(g) for g in session.grid.to_grafts(cells)] == [
        "Graft(positions=[5], layers=[1], components=['router', 'experts'], donor='sft')",
        "Graft(positions=[3, 4], layers=[1], components=['o'], donor='sft', heads=[0])",
        "Graft(positions=[3, 4], layers=[0, 2], components=['experts'], donor='sft', experts=[1, 3])",
    ]


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_every_expert_with_the_router_is_the_whole_ffn_cell(arch):
    """As the library's own test (tests/engine/test_engine_moe.py): the grid's expert cells of a
    cell, with the router (and any shared expert) grafted, equal the whole FFN cell; the experts
    alone are the donor's experts on the recipient's routing, not the block; one expert cell is the
    independent reference's graft of that expert."""
    recipient, donor = make_pair(arch, 0)
    grafter = Grafter(recipient, donor)
    grid = Grid.of(grafter)
    count = grid.experts
    assert count == EXPERTS
    ids = torch.tensor([[3, 17, 42, 8, 99, 5]])
    experts = grid.to_grafts([Cells("donor", "FFN", 1, (1, 5), expert=e) for e in range(count)])
    rest = [c for c in grid.layer_groups["FFN"] if c != "experts"]  # router, and shared expert (+ gate)
    whole = grafter.logits(ids, grafts=grid.to_grafts([Cells("donor", "FFN", 1, (1, 5))]))
    split = grafter.logits(ids, grafts=[*experts, Graft([1, 5], [1], rest, "donor")])
    assert (split - whole).abs().max().item() < 1e-5
    alone = grafter.logits(ids, grafts=experts)
    assert (alone - whole).abs().max().item() > 1e-3, f"{arch}: the router's choice changes nothing?"
    one = grafter.logits(ids, grafts=grid.to_grafts([Cells("donor", "FFN", 1, (1, 5), expert=count - 1)]))
    direct = grafter.logits(ids, grafts=Graft([1, 5], [1], "experts", "donor", experts=[count - 1]))
    assert torch.equal(one, direct)
    want = reference_unit_logits(recipient, donor, ids[0], [GraftSpec([1, 5], 1, "experts", experts=[count - 1])])
    assert (one[0] - want).abs().max().item() < 1e-4


def test_the_exact_map_runs_the_experts_of_split_layers(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    ids, target, n = encoded.input_ids, encoded.target_id, len(encoded.input_ids)
    out = analyses.exact_map(session, encoded, "sft", [], expert_layers=[1])
    base = _logp(session.grafter, ids, target)
    for p, e in ((n - 1, 0), (n - 1, 3), (2, 1)):
        graft = Graft([p], [1], ["experts"], "sft", experts=[e])
        assert out["experts"]["FFN"][p][1][e] == pytest.approx(
            _logp(session.grafter, ids, target, [graft]) - base, abs=1e-5
        )
        assert out["experts"]["FFN"][p][0][e] is None  # layer 0 was not split: not run
    # The whole FFN cell is every expert with the router (the page's map shows both).
    ffn = next(j for j, c in enumerate(session.grid.columns) if (c.group, c.layer) == ("FFN", 1))
    split = [
        Graft([n - 1], [1], ["experts"], "sft", experts=list(range(EXPERTS))),
        Graft([n - 1], [1], ["router"], "sft"),
    ]
    assert out["values"][n - 1][ffn] == pytest.approx(_logp(session.grafter, ids, target, split) - base, abs=1e-5)
    # Rows: the recipient and every cell but FNORM's and UNEMB's off the scoring position; the
    # recipient again and each expert of layer 1 at each position.
    cells = n * len(session.grid.columns) - 2 * (n - 1)
    assert out["heads"] is None and out["rows"] == (1 + cells) + (1 + n * EXPERTS)
    with pytest.raises(ValueError, match=r"0\.\.2"):
        analyses.exact_map(session, encoded, "sft", [], expert_layers=[LAYERS])


def test_leave_one_out_names_the_expert(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    ids, target, lt = encoded.input_ids, encoded.target_id, len(encoded.input_ids) - 1
    cells = [Cells("sft", "FFN", 0, (lt,), expert=1), Cells("sft", "FFN", 0, (lt,), expert=2)]
    out = analyses.exact_map(session, encoded, "sft", cells)["leave_one_out"]
    both = _logp(session.grafter, ids, target, session.grid.to_grafts(cells))
    assert out["current_logprob"] == pytest.approx(both, abs=1e-5)
    for entry in out["cells"]:
        other = 3 - entry["expert"]  # the expert left in
        left = _logp(session.grafter, ids, target, [Graft([lt], [0], ["experts"], "sft", experts=[other])])
        assert entry["head"] is None and entry["effect"] == pytest.approx(both - left, abs=1e-5)
    assert sorted(e["expert"] for e in out["cells"]) == [1, 2]


def test_the_attribution_map_scores_each_expert_cell(session):
    """Each expert's value is `attribute(grain="expert")`'s unit; the experts sum to the experts
    component's cell (the experts' output is linear in their top-k weights)."""
    from weightgraft.attribution.attribute import attribute

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    out = analyses.attribution(session, encoded, "sft")
    n = len(encoded.input_ids)
    experts = torch.tensor(out["experts"]["FFN"])  # [position, layer, expert]
    assert experts.shape == (n, LAYERS, EXPERTS)
    ids = torch.tensor([encoded.input_ids])
    direct = attribute(session.grafter, ids, [encoded.target_id], steps=8, donor="sft", grain="expert")
    assert torch.allclose(experts, direct.units["experts"][0, :n].float(), atol=1e-5)
    component = direct.cells[0, :n, :, direct.layer_components.index("experts")]
    assert torch.allclose(experts.sum(-1), component.float(), atol=1e-4)
    assert experts.abs().max() > 1e-4
    assert out["heads"] is not None and set(out["heads"]) == {"ATTN", "O"}  # heads as before


def test_bad_expert_cells_are_refused_with_a_message(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    bad = {
        r"expert 4 of FFN layer 1 is out of range: .* 4 experts \(0\.\.3\); pick an expert": [
            Cells("sft", "FFN", 1, (1,), expert=EXPERTS)
        ],
        "out of range": [Cells("sft", "FFN", 1, (1,), expert=-1)],
        "group O has no experts; experts refine FFN": [Cells("sft", "O", 1, (1,), expert=0)],
        "one head or one expert, not both": [Cells("sft", "FFN", 1, (1,), head=0, expert=0)],
    }
    for words, cells in bad.items():
        with pytest.raises(GridError, match=words):
            session.predict(encoded, cells)
    dense = Grid.of(Grafter(make_model("llama", 0), make_model("llama", 1)))
    with pytest.raises(GridError, match="no mixture-of-experts blocks .* graft the FFN column whole"):
        dense.check([Cells("donor", "FFN", 0, (1,), expert=0)], 4)


def test_expert_cells_over_http(session):
    server = ServerThread(session)
    url = server.start()

    def post(path: str, body: dict) -> dict:
        request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    try:
        prompt = {"text": PROMPT.text, "target": PROMPT.target, "prompt_id": PROMPT.id}
        cell = {"donor": "sft", "group": "FFN", "layer": 0, "positions": [1], "expert": 9}
        with pytest.raises(urllib.error.HTTPError) as err:
            post("api/predict", {"prompt": prompt, "cells": [cell]})
        assert err.value.code == 400
        message = json.loads(err.value.read())["error"]
        assert "expert 9" in message and "0..3" in message and "Traceback" not in message
        cell["expert"] = 3
        assert "experts=[3]" in post("api/predict", {"prompt": prompt, "cells": [cell]})["python"]
        exact = post("api/exact", {"prompt": prompt, "donor": "sft", "cells": [cell], "experts": [0]})
        assert exact["experts"]["FFN"][1][0][3] is not None and exact["leave_one_out"]["cells"][0]["expert"] == 3
        assert len(post("api/attribute", {"prompt": prompt, "donor": "sft"})["experts"]["FFN"][0]) == LAYERS
    finally:
        server.stop()


def test_expert_cells_score_over_many_prompts_as_roles(session):
    from weightgraft.explore.many import RoleGraft

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = tuple(encoded.selections["FE+LT"])
    out = analyses.many_prompts(session, encoded, [Cells("sft", "FFN", 2, fe_lt, expert=1)], count=4)
    assert out["positions"] == ["FE+LT"] and out["prompts"] == 4
    role = RoleGraft("LT", Graft([0], [2], ["experts"], "sft", experts=[1]))
    assert role.on({"last_token": [4]}, 5).experts == [1]
