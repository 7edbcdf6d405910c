"""weightgraft's finer presets (issue 20): the conditions, grafts, meta and controls each produces
for a given depth, head count and width, exactly (the report reads this meta; the run config's
fields are FINER_CONTRACT's)."""

from __future__ import annotations

import pytest

from weightgraft.experiments.config import ConfigError, parse_config
from weightgraft.experiments.plan.selection import experiment_conditions
from weightgraft.experiments.preset_registry import get_preset
from weightgraft.paper.finer_presets import DOSES, FINER_PRESET_NAMES, RANKS, finer_dose, finer_heads_o, finer_rank

ALL_WEIGHTS = [{"positions": "ALL", "layers": "all", "components": "all"}]


def _names(exp: dict) -> list[str]:
    return [c["name"] for c in exp["conditions"]]


@pytest.mark.parametrize(("layers", "band"), [(8, [6, 7]), (6, [3, 4, 5]), (18, [12, 13, 14, 15, 16, 17])])
def test_heads_o_one_cell_per_layer_and_head_of_the_fourth_quarter(layers, band):
    (exp,) = finer_heads_o(max_examples=5, num_layers=layers, num_heads=4)
    assert (exp["name"], exp["recipient"], exp["donor"], exp["dataset"]) == ("finer_heads_o", "b2a", "sft", "relation")
    assert (
        exp["max_examples"] == 5
        and exp["directions"] == "forward"
        and "not a finding of the paper" in exp["description"]
    )
    refs, wholes, cells = (
        exp["conditions"][:3],
        exp["conditions"][3 : 3 + len(band)],
        exp["conditions"][3 + len(band) :],
    )
    assert refs == [
        {"name": "B2A", "grafts": [], "description": "recipient alone", "meta": {"reference": "recipient"}},
        {
            "name": "SFT",
            "grafts": ALL_WEIGHTS,
            "description": "donor model alone (every weight everywhere)",
            "meta": {"reference": "donor"},
        },
        {
            "name": "O",
            "grafts": [{"positions": "LT", "layers": "authors_fourth_quarter", "components": "O"}],
            "description": "O (every head) at LT in the authors' fourth quarter",
            "meta": {"reference": "component", "components": "O"},
        },
    ]
    assert wholes == [
        {
            "name": f"O L{i}",
            "grafts": [{"positions": "LT", "layers": [i], "components": "O"}],
            "description": f"O (every head) at LT in layer {i}",
            "meta": {"reference": "component", "components": "O", "layer": i},
        }
        for i in band
    ]
    assert [(c["meta"]["layer"], c["meta"]["head"]) for c in cells] == [(i, h) for i in band for h in range(4)]
    for cell in cells:
        layer, head = cell["meta"]["layer"], cell["meta"]["head"]
        assert cell["name"] == f"O L{layer} h{head}"
        assert cell["meta"] == {"grain": "head", "layer": layer, "head": head, "components": "O"}
        assert cell["grafts"] == [{"positions": "LT", "layers": [layer], "components": "O", "heads": [head]}]
        assert cell["controls"] == {"random": 3, "seed": 0, "vary": "heads", "complement": True}


def test_heads_o_random_controls_fit_the_head_count():
    (exp,) = finer_heads_o(num_layers=4, num_heads=2)
    cells = exp["conditions"][4:]  # after B2A, SFT, O and O L3
    assert [c["name"] for c in cells] == ["O L3 h0", "O L3 h1"]
    assert {c["controls"]["random"] for c in cells} == {1}  # only one other head to draw
    (exp,) = finer_heads_o(num_layers=4, num_heads=1)
    assert exp["conditions"][4]["controls"] == {"random": 0, "seed": 0, "vary": "heads", "complement": True}


def test_heads_o_needs_the_shape():
    with pytest.raises(ValueError, match="give num_layers and num_heads"):
        finer_heads_o(num_layers=8)


def test_rank_points_references_and_control():
    (exp,) = finer_rank(templates=["paper_1"])
    assert exp["recipient"] == "b2a" and exp["templates"] == ["paper_1"]
    assert _names(exp) == ["B2A", "SFT", "ATTN+O+FFN", *(f"O+FFN rank {k}" for k in RANKS), "O+FFN"]
    whole = exp["conditions"][2]
    assert whole["meta"] == {"reference": "component", "components": "ATTN+O+FFN"}
    assert whole["grafts"] == [{"positions": "LT", "layers": "authors_fourth_quarter", "components": "ATTN+O+FFN"}]
    graft = {"positions": "LT", "layers": "authors_fourth_quarter", "components": "O+FFN"}
    for k, cond in zip(RANKS, exp["conditions"][3:]):
        assert cond["grafts"] == [dict(graft, shape={"rank": k})]
        assert cond["meta"] == {"shape": "rank", "rank": k, "series": "O+FFN"} and "controls" not in cond
    full = exp["conditions"][-1]
    assert full["grafts"] == [graft]  # the whole change: the donor itself, no shape
    assert full["meta"] == {"shape": "rank", "rank": "full", "series": "O+FFN"}
    assert full["controls"] == {"random": 3, "seed": 0, "vary": "layers", "complement": False}


def test_rank_drops_ranks_above_the_width_and_says_so():
    (exp,) = finer_rank(hidden_size=6)
    assert _names(exp)[3:] == ["O+FFN rank 1", "O+FFN rank 2", "O+FFN rank 4", "O+FFN"]
    assert "ranks [8, 16] are left out, above hidden_size 6" in exp["description"]
    (exp,) = finer_rank(hidden_size=16)
    assert "O+FFN rank 16" in _names(exp) and "left out" not in exp["description"]


def test_dose_two_series_each_at_every_lambda():
    fe_lt, o_ffn = finer_dose()
    assert (fe_lt["name"], fe_lt["recipient"], o_ffn["name"], o_ffn["recipient"]) == (
        "finer_dose_fe_lt",
        "pre",
        "finer_dose_o_ffn",
        "b2a",
    )
    cases = (
        (fe_lt, "FE+LT", {"positions": "FE+LT", "layers": "all", "components": "WEIGHTS"}, "positions", "PRE"),
        (
            o_ffn,
            "O+FFN",
            {"positions": "LT", "layers": "authors_fourth_quarter", "components": "O+FFN"},
            "layers",
            "B2A",
        ),
    )
    for exp, series, graft, vary, recipient in cases:
        assert _names(exp)[:2] == [recipient, "SFT"]
        points = exp["conditions"][2:]
        assert [p["meta"] for p in points] == [{"shape": "scale", "scale": s, "series": series} for s in DOSES]
        assert [p["name"] for p in points] == [f"{series} x{s:g}" for s in DOSES]
        for point, scale in zip(points, DOSES):
            assert point["grafts"] == [graft if scale == 1 else dict(graft, shape={"scale": scale})]
            controls = {"random": 3, "seed": 0, "vary": vary, "complement": False}
            assert point.get("controls") == (controls if scale == 1 else None)


def test_registered_with_their_options():
    assert FINER_PRESET_NAMES == ("finer_heads_o", "finer_rank", "finer_dose")
    assert get_preset("finer_heads_o").options == {"num_layers", "num_heads"}
    assert get_preset("finer_rank").options == {"hidden_size"}
    assert get_preset("finer_dose").options == frozenset()


def test_config_refuses_a_shape_option_on_another_preset():
    body = {"models": {"pre": "a", "sft": "b"}, "datasets": {"relation": "d"}}
    with pytest.raises(ConfigError, match="preset 'known_facts' has no `num_heads` option"):
        parse_config(dict(body, experiments=[{"preset": "known_facts", "num_heads": 4}]))
    with pytest.raises(ConfigError, match="preset 'finer_dose' has no `hidden_size` option .only finer_rank"):
        parse_config(dict(body, experiments=[{"preset": "finer_dose", "hidden_size": 4}]))


def test_presets_validate_and_resolve_with_their_meta():
    body = {"models": {"pre": "a", "sft": "b", "b2a": "c"}, "datasets": {"relation": "d"}}
    entries = [
        {"preset": "finer_heads_o", "num_layers": 8, "num_heads": 4},
        {"preset": "finer_rank"},
        {"preset": "finer_dose"},
    ]
    config = parse_config(dict(body, experiments=entries))
    built = [*finer_heads_o(num_layers=8, num_heads=4), *finer_rank(), *finer_dose()]
    for spec, exp in zip(config.expanded(), built, strict=True):
        resolved = {c.name: c for c in experiment_conditions(spec, 8)}
        for cond in exp["conditions"]:  # each preset row, as the plan resolves it (controls follow it)
            row = resolved[cond["name"]]
            assert row.meta == cond["meta"] and row.recipient == exp["recipient"]
            graft = cond["grafts"][0] if cond["grafts"] else None
            if graft and "heads" in graft:
                assert [g.heads for g in row.grafts] == [graft["heads"]]
            if graft and "shape" in graft:
                assert [g.shape.to_json() for g in row.grafts] == [graft["shape"]]
    heads = {c.name: c for c in experiment_conditions(config.expanded()[0], 8)}
    assert [g.to_json()["layers"] for g in heads["O L7 h3"].grafts] == [[7]]
