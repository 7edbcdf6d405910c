"""Heads in the explorer's grid (issue 32): a head cell of O or ATTN is the library's
`Graft(heads=...)`, checked three ways: against that Graft run directly, against a model whose
weights were edited by hand (no hooks: a head grafted at every position is a weight surgery), and
against the whole column (all heads of a column equal the column). Out-of-range heads get a
message naming the range, over HTTP too; the exports carry the heads."""

from __future__ import annotations

import copy
import json
import urllib.error
import urllib.request

import pytest
import torch
import yaml

import tiny_world
from explore_fixtures import world
from weightgraft.engine.graft import Graft
from weightgraft.experiments.conditions import ConditionSpec, resolve_condition
from weightgraft.experiments.models import load_model
from weightgraft.explore.grid import Cells, Grid, GridError
from weightgraft.explore.server import ServerThread

PROMPT = tiny_world.make_prompts()[2]  # paper_3: FE, R, M and LT all present
HEADS, KV_HEADS = 4, 2  # the tiny world's Llama (exp_fixtures.build_models)


def _graft_row(result) -> dict:
    return next(r for r in result["predictions"] if r["name"] == "graft")


def _probs(result) -> tuple[torch.Tensor, list[int]]:
    row = _graft_row(result)
    return torch.tensor([t["prob"] for t in row["top"]]), [t["id"] for t in row["top"]]


def test_the_grid_describes_its_heads(session):
    info = session.info()
    assert info["heads"] == {"query": HEADS, "kv": KV_HEADS, "groups": {"ATTN": HEADS, "O": HEADS}}


def test_a_head_cell_is_the_librarys_graft_with_heads(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = tuple(encoded.selections["FE+LT"])
    cells = [Cells("sft", "O", 1, fe_lt, head=2), Cells("sft", "ATTN", 2, fe_lt, head=3)]
    result = session.predict(encoded, cells, top_k=5)
    direct = [
        Graft(list(fe_lt), [1], ["o"], "sft", heads=[2]),
        Graft(list(fe_lt), [2], ["q"], "sft", heads=[3]),
        Graft(list(fe_lt), [2], ["k", "v"], "sft", heads=[1]),  # query head 3 reads key-value head 3 // 2
    ]
    logits = session.grafter.last_logits(torch.tensor([encoded.input_ids]), grafts=direct)[0]
    shown, ids = _probs(result)
    assert torch.allclose(torch.softmax(logits.float(), -1)[ids], shown, atol=1e-6)
    assert "heads=[2]" in result["python"] and "heads=[3]" in result["python"]
    scope: dict = {}
    exec(result["python"], scope)  # noqa: S102 - the code the page shows, run as a user would
    assert torch.allclose(scope["probs"][ids], shown, atol=1e-6)


def _edited_model(root, layer: int, rows: dict[str, list[slice]], columns: list[slice]):
    """The recipient with the sft donor's weights copied in by hand: `rows` of q/k/v projections
    (output rows), `columns` of o_proj (input columns), at one layer."""
    paths, _ = world(root)
    recipient, donor = load_model(paths["pre"], "cpu", "float32"), load_model(paths["sft"], "cpu", "float32")
    model = copy.deepcopy(recipient)
    mine, theirs = model.model.layers[layer].self_attn, donor.model.layers[layer].self_attn
    with torch.no_grad():
        for name, cuts in rows.items():
            for cut in cuts:
                getattr(mine, name).weight[cut] = getattr(theirs, name).weight[cut]
        for cut in columns:
            mine.o_proj.weight[:, cut] = theirs.o_proj.weight[:, cut]
    return model


def test_head_cells_at_every_position_equal_a_hand_edited_model(session, root):
    """Independent of the engine's hooks: every position grafted is the donor's weights in place."""
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    everywhere = tuple(range(len(encoded.input_ids)))
    config = session.grafter.recipient.config
    dim = config.hidden_size // config.num_attention_heads
    cells = [Cells("sft", "O", 2, everywhere, head=1), Cells("sft", "ATTN", 2, everywhere, head=2)]
    result = session.predict(encoded, cells, top_k=5)
    head = lambda h: slice(h * dim, (h + 1) * dim)  # noqa: E731
    model = _edited_model(root, 2, {"q_proj": [head(2)], "k_proj": [head(1)], "v_proj": [head(1)]}, [head(1)])
    with torch.no_grad():
        logits = model(torch.tensor([encoded.input_ids])).logits[0, -1]
    shown, ids = _probs(result)
    assert torch.allclose(torch.softmax(logits.float(), -1)[ids], shown, atol=1e-5)


@pytest.mark.parametrize("group", ["O", "ATTN"])
def test_all_heads_of_a_column_equal_the_column(session, group):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    lt = tuple(encoded.selections["FE+LT"])
    whole = session.predict(encoded, [Cells("task", group, 3, lt)], top_k=8)
    split = session.predict(encoded, [Cells("task", group, 3, lt, head=h) for h in range(HEADS)], top_k=8)
    assert [t["id"] for t in _graft_row(split)["top"]] == [t["id"] for t in _graft_row(whole)["top"]]
    assert _graft_row(split)["target"]["prob"] == pytest.approx(_graft_row(whole)["target"]["prob"], abs=1e-5)
    one = session.predict(encoded, [Cells("task", group, 3, lt, head=0)], top_k=8)
    assert _graft_row(one)["target"]["prob"] != pytest.approx(_graft_row(whole)["target"]["prob"], abs=1e-7)


def test_head_cells_merge_into_few_grafts(session):
    """Heads of one layer and positions become one Graft; a head of a cell grafted whole adds nothing."""
    grid = session.grid
    cells = [
        Cells("sft", "O", 1, (3, 4), head=0),
        Cells("sft", "O", 1, (3, 4), head=2),
        Cells("sft", "O", 2, (3, 4), head=0),
        Cells("sft", "O", 2, (3, 4), head=2),
        Cells("sft", "FFN", 1, (5,)),
        Cells("sft", "FFN", 1, (5,), head=None),
    ]
    got = [repr(g) for g in grid.to_grafts(cells)]
    assert got == [
        "Graft(positions=[5], layers=[1], components=['gate', 'up', 'down'], donor='sft')",
        "Graft(positions=[3, 4], layers=[1, 2], components=['o'], donor='sft', heads=[0, 2])",
    ]
    covered = grid.to_grafts([Cells("sft", "O", 1, (3,)), Cells("sft", "O", 1, (3,), head=1)])
    assert [repr(g) for g in covered] == ["Graft(positions=[3], layers=[1], components=['o'], donor='sft')"]


def test_bad_head_cells_are_refused_with_a_message(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    bad = {
        "head 4 of O layer 1 is out of range": [Cells("sft", "O", 1, (1,), head=HEADS)],
        "0..3": [Cells("sft", "ATTN", 0, (1,), head=-1)],
        "FFN has no heads": [Cells("sft", "FFN", 0, (1,), head=0)],
        "EMB has no heads": [Cells("sft", "EMB", None, (1,), head=0)],
        "two donors": [Cells("sft", "O", 0, (1,), head=0), Cells("task", "O", 0, (1,), head=1)],
    }
    for words, cells in bad.items():
        with pytest.raises(GridError, match=words):
            session.predict(encoded, cells)


def test_the_condition_and_the_comparison_carry_the_heads(session):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = tuple(encoded.selections["FE+LT"])
    cells = [Cells("sft", "O", 3, fe_lt, head=1)]
    result = session.predict(encoded, cells)
    [spec] = yaml.safe_load(result["condition"])
    assert spec["grafts"][0]["heads"] == [1]
    condition = resolve_condition(ConditionSpec.model_validate(spec), recipient="pre", donor="sft")
    assert [g.heads for g in condition.grafts] == [[1]]
    from weightgraft.explore.compare import Pin

    compared = session.compare(encoded, [], [Pin("head", tuple(cells))])
    pin = next(c for c in compared["columns"] if c["kind"] == "pin")
    assert pin["prob"] == pytest.approx(_graft_row(result)["target"]["prob"], abs=1e-6)


def test_out_of_range_heads_over_http(session):
    server = ServerThread(session)
    url = server.start()
    try:
        prompt = {"text": PROMPT.text, "target": PROMPT.target, "prompt_id": PROMPT.id}
        body = {"prompt": prompt, "cells": [{"donor": "sft", "group": "O", "layer": 0, "positions": [1], "head": 9}]}
        request = urllib.request.Request(url + "api/predict", data=json.dumps(body).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=30)
        assert err.value.code == 400
        message = json.loads(err.value.read())["error"]
        assert "head 9" in message and f"0..{HEADS - 1}" in message and "Traceback" not in message
        body["cells"][0]["head"] = 3
        request = urllib.request.Request(url + "api/predict", data=json.dumps(body).encode(), method="POST")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30) as response:
            assert "heads=[3]" in json.loads(response.read())["python"]
    finally:
        server.stop()


def test_the_attribution_map_scores_each_head_cell(session):
    """O's heads sum to O's cell (Llama's o has no bias); ATTN's head h is q's unit h with k's and
    v's unit of the key-value head it reads, as `attribute(grain="head")` gives them."""
    from weightgraft.attribution.attribute import attribute

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    out = session.attribute(encoded, "task")
    n = len(encoded.input_ids)
    o_columns = [j for j, c in enumerate(session.grid.columns) if c.group == "O"]
    heads = torch.tensor(out["heads"]["O"])  # [position, layer, head]
    assert heads.shape == (n, 4, HEADS)
    assert torch.allclose(heads.sum(-1), torch.tensor(out["values"])[:, o_columns], atol=1e-4)
    ids = torch.tensor([encoded.input_ids])
    direct = attribute(session.grafter, ids, [encoded.target_id], steps=8, donor="task", grain="head").units
    p, layer, h = n - 1, 2, 3
    expected = sum(float(direct[c][0, p, layer, unit]) for c, unit in (("q", h), ("k", h // 2), ("v", h // 2)))
    assert out["heads"]["ATTN"][p][layer][h] == pytest.approx(expected, abs=1e-5)


def test_the_exact_map_runs_the_heads_of_split_layers(session):
    from weightgraft.explore import analyses

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    out = analyses.exact_map(session, encoded, "sft", [], head_layers=[1])
    ids = torch.tensor([encoded.input_ids])
    base = torch.log_softmax(session.grafter.last_logits(ids)[0].float(), -1)[encoded.target_id]
    for group, comps, p, h in (("O", [("o", 2)], 3, 2), ("ATTN", [("q", 1), ("k", 0), ("v", 0)], 5, 1)):
        grafts = [Graft([p], [1], [c], "sft", heads=[unit]) for c, unit in comps]
        logp = torch.log_softmax(session.grafter.last_logits(ids, grafts=grafts)[0].float(), -1)[encoded.target_id]
        assert out["heads"][group][p][1][h] == pytest.approx(float(logp - base), abs=1e-5)
        assert out["heads"][group][p][0][h] is None  # layer 0 was not split: not run
    with pytest.raises(ValueError, match="0..3"):
        analyses.exact_map(session, encoded, "sft", [], head_layers=[7])


def test_head_cells_score_over_many_prompts_as_roles(session):
    """The graft over other prompts keeps its heads: its role graft is the same Graft with heads."""
    from weightgraft.explore import analyses
    from weightgraft.explore.many import RoleGraft

    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    fe_lt = tuple(encoded.selections["FE+LT"])
    out = analyses.many_prompts(session, encoded, [Cells("sft", "O", 3, fe_lt, head=1)], count=4)
    assert out["positions"] == ["FE+LT"] and out["prompts"] == 4
    role = RoleGraft("LT", Graft([0], [3], ["o"], "sft", heads=[1]))
    assert role.on({"last_token": [4]}, 5).heads == [1]


@pytest.mark.parametrize("arch", ["gpt2", "gpt_neox", "llama", "gemma2", "qwen3", "phi3"])
def test_every_architecture_splits_into_heads(arch):
    """Fused projections (GPT-2's c_attn, NeoX's query_key_value, Phi-3's qkv_proj) too: the grid
    reads the head counts, and a head cell runs as the library's Graft with heads."""
    from tiny_model_fixtures import make_model
    from weightgraft.engine.grafter import Grafter

    grafter = Grafter(make_model(arch, 0), make_model(arch, 1))
    grid = Grid.of(grafter)
    assert grid.heads is not None and grid.describe()["heads"]["groups"] == {
        "ATTN": grid.heads.query,
        "O": grid.heads.query,
    }
    last = grid.heads.query - 1
    cells = [Cells("donor", "O", 0, (1,), head=0), Cells("donor", "ATTN", 0, (2,), head=last)]
    grafts = grid.to_grafts(grid.check(cells, 4))
    direct = [Graft([1], [0], ["o"], "donor", heads=[0]), Graft([2], [0], ["q"], "donor", heads=[last])]
    direct.append(Graft([2], [0], ["k", "v"], "donor", heads=[grid.heads.kv_of(last)]))
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.allclose(grafter.last_logits(ids, grafts=grafts), grafter.last_logits(ids, grafts=direct), atol=1e-6)


def test_multi_latent_attention_offers_heads_of_o_only():
    """MiniCPM3's q is a chain and its k spans two projections: ATTN has no heads, O has."""
    import census_models
    from weightgraft import Grafter
    from weightgraft.explore.heads import check_head, head_counts

    recipient = census_models.build_tiny("minicpm3", 0)
    counts = head_counts(Grafter(recipient, census_models.donor_of(recipient, 1)))
    assert counts.groups == ("O",) and counts.describe()["groups"] == {"O": 4}
    assert "ATTN has no heads" in check_head("ATTN", 0, counts, "")
    assert check_head("O", 1, counts, "") is None
