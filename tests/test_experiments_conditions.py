"""Conditions select exactly the right token positions; configs fail early with named errors."""

from __future__ import annotations

import pytest
from exp_fixtures import base_config, build_tokenizer, make_prompts

from weightgraft.data.encode import encode_prompt
from weightgraft.experiments.conditions import resolve_condition
from weightgraft.experiments.config import ConfigError, parse_config
from weightgraft.experiments.plan import experiment_conditions, layer_indices, select_examples
from weightgraft.experiments.roles import NotApplicable, parse_positions


@pytest.fixture(scope="module")
def movie_prompt():
    """`<s> In Iron Tide , Ada Brook acts alongside` -> target ` Cyril Dane` (2 tokens)."""
    tok = build_tokenizer()
    prompt = next(p for p in make_prompts() if p.id == "f0-movie")
    enc = encode_prompt(tok, prompt)
    words = tok.convert_ids_to_tokens(enc.input_ids)
    assert words == ["<s>", "In", "Iron", "Tide", ",", "Ada", "Brook", "acts", "alongside"]
    assert len(enc.target_ids) == 2
    return enc


EXPECTED = {  # token indices in the movie prompt above
    "FE": [5, 6], "M": [2, 3], "R": [7, 8], "LT": [8], "other": [0, 1, 4],
    "FE+LT": [5, 6, 8], "(FE+LT)^C": [0, 1, 2, 3, 4, 7], "FE^C": [0, 1, 2, 3, 4, 7, 8],
    "LT^C": [0, 1, 2, 3, 4, 5, 6, 7], "M+LT": [2, 3, 8], "FE+M+LT": [2, 3, 5, 6, 8],
    "ALL": list(range(9)), "NONE": [],
}


@pytest.mark.parametrize("expr", list(EXPECTED))
def test_position_expression_selects_expected_tokens(movie_prompt, expr):
    got = parse_positions(expr).evaluate(movie_prompt.positions, len(movie_prompt.input_ids))
    assert got == EXPECTED[expr]


@pytest.mark.parametrize("name", ["FE", "LT", "FE+LT", "(FE+LT)^C", "M", "other"])
def test_condition_row_mask_extends_last_token_to_target_tokens(movie_prompt, name):
    cond = resolve_condition(name, recipient="pre", donor="sft")
    n = len(movie_prompt.input_ids)
    (mask, layers, comps), = cond.row_masks(movie_prompt.positions, n, n + 1)
    chosen = [i for i, m in enumerate(mask) if m]
    extra = [n] if n - 1 in EXPECTED[name] else []  # the teacher-forced target token
    assert chosen == EXPECTED[name] + extra
    assert (layers, comps) == ("all", ["all"])


def test_component_condition_grafts_fe_fully_and_components_at_lt(movie_prompt):
    cond = resolve_condition("O+FFN", recipient="pre", donor="sft")
    n = len(movie_prompt.input_ids)
    (fe_mask, fe_layers, fe_comps), (lt_mask, lt_layers, lt_comps) = cond.row_masks(
        movie_prompt.positions, n, n)
    assert [i for i, m in enumerate(fe_mask) if m] == [5, 6]
    assert (fe_layers, fe_comps) == ("all", ["all"])
    assert [i for i, m in enumerate(lt_mask) if m] == [8]
    assert (lt_layers, lt_comps) == ("last_quarter", ["o", "mlp"])
    hybrid = resolve_condition("O+FFN", recipient="task", donor="sft", component_base=None)
    assert len(hybrid.row_masks(movie_prompt.positions, n, n)) == 1


def test_missing_role_is_not_applicable():
    tok = build_tokenizer()
    headline = next(p for p in make_prompts() if p.template_id == "headline")
    enc = encode_prompt(tok, headline)
    cond = resolve_condition("M+LT", recipient="pre", donor="sft")
    with pytest.raises(NotApplicable, match="M"):
        cond.row_masks(enc.positions, len(enc.input_ids), len(enc.input_ids))
    # `other` needs no particular role, so it stays applicable
    other = resolve_condition("other", recipient="pre", donor="sft")
    assert other.row_masks(enc.positions, len(enc.input_ids), len(enc.input_ids))


def test_layer_bands_follow_engine_semantics():
    assert layer_indices("last_quarter", 8) == [6, 7]
    assert layer_indices("eighth_3", 16) == [4, 5]
    assert layer_indices("first_half", 5) == [0, 1]
    assert layer_indices([-1, 0], 4) == [0, 3]
    with pytest.raises(ValueError, match="outside"):
        layer_indices(9, 4)


def _config(experiments):
    return base_config({"pre": "p", "sft": "s", "task": "t"}, "d", experiments)


def test_unknown_condition_is_named():
    bad = [{"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft",
            "conditions": ["PRE", "FE+XQ"]}]
    with pytest.raises(ConfigError, match="XQ") as err:
        parse_config(_config(bad))
    assert "FE+XQ" in str(err.value)


def test_unknown_field_is_named():
    bad = [{"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft",
            "conditons": ["PRE"], "conditions": ["PRE"]}]
    with pytest.raises(ConfigError, match="unknown field 'conditons'"):
        parse_config(_config(bad))
    with pytest.raises(ConfigError, match="unknown field 'seeed'"):
        parse_config({**_config([{"preset": "position_grafting"}]), "seeed": 1})


def test_unknown_preset_component_and_model_key_are_named():
    with pytest.raises(ConfigError, match="position_graftin"):
        parse_config(_config([{"preset": "position_graftin"}]))
    bad = [{"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft",
            "conditions": [{"name": "x", "grafts": [{"positions": "LT", "components": "O+MLPX"}]}]}]
    with pytest.raises(ConfigError, match="MLPX"):
        parse_config(_config(bad))
    with pytest.raises(ConfigError, match="'freetext'"):
        parse_config(_config([{"preset": "free_text"}]))


def test_presets_expand_in_paper_order():
    cfg = parse_config(_config([{"preset": "position_grafting"}, {"preset": "component_grafting"},
                                {"preset": "layer_sweeps"}]))
    exps = cfg.expanded()
    assert [e.name for e in exps] == ["position_grafting", "components_pre_sft",
                                      "components_task_sft", "components_hybrid", "layer_sweeps"]
    names = [c.name for c in experiment_conditions(exps[0], 8)]
    assert names == ["PRE", "SFT", "FE", "LT", "FE+LT", "(FE+LT)^C", "FE^C", "LT^C", "M",
                     "M+LT", "FE+M", "FE+M+LT"]
    sweep = [c for c in experiment_conditions(exps[4], 8) if c.meta]
    assert len(sweep) == 2 * 4 * 4  # FE/LT x 4 component sets x quarters of 8 layers
    hybrid = {c.name: c for c in experiment_conditions(exps[3], 8)}
    assert hybrid["O+FFN"].recipient == "task" and len(hybrid["O+FFN"].grafts) == 1


def test_example_cap_is_seeded_and_keeps_every_template():
    prompts = make_prompts()
    a = select_examples(prompts, None, 6, seed=3, context="t")
    b = select_examples(prompts, None, 6, seed=3, context="t")
    assert [p.id for p in a] == [p.id for p in b]
    assert {p.template_id for p in a} == {"headline", "qa", "movie"}
    with pytest.raises(ValueError, match="nosuch"):
        select_examples(prompts, ["nosuch"], None, seed=0, context="t")
