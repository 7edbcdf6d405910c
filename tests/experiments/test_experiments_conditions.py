"""Conditions select exactly the right token positions; configs fail early with named errors."""

from __future__ import annotations

import pytest

from tiny_world import base_config, build_tokenizer, make_prompts
from weightgraft.adapters import adapter_for
from weightgraft.data.encode import encode_prompt
from weightgraft.experiments.conditions import resolve_condition
from weightgraft.experiments.conditions.position_roles import NotApplicable, parse_positions
from weightgraft.experiments.config import ConfigError, parse_config
from weightgraft.experiments.layers import concrete_layers
from weightgraft.experiments.plan.selection import ModelFacts, experiment_conditions, select_examples
from weightgraft.paper.presets import PRESETS  # noqa: F401  (registers the presets the configs name)


@pytest.fixture(scope="module")
def movie_prompt():
    """`<s> Ada Brook stars in Iron Tide alongside` -> target ` Cyril Dane` (2 tokens)."""
    tok = build_tokenizer()
    prompt = next(p for p in make_prompts() if p.id == "f0-paper_3")
    enc = encode_prompt(tok, prompt)
    words = tok.convert_ids_to_tokens(enc.input_ids)
    assert words == ["<s>", "Ada", "Brook", "stars", "in", "Iron", "Tide", "alongside"]
    assert len(enc.target_ids) == 2
    return enc


EXPECTED = {  # token indices in the title prompt above
    "FE": [1, 2],
    "M": [5, 6],
    "R": [3],
    "LT": [7],
    "other": [0, 4],
    "FE+LT": [1, 2, 7],
    "(FE+LT)^C": [0, 3, 4, 5, 6],
    "FE^C": [0, 3, 4, 5, 6, 7],
    "LT^C": [0, 1, 2, 3, 4, 5, 6],
    "M+LT": [5, 6, 7],
    "FE+M+LT": [1, 2, 5, 6, 7],
    "FE+R": [1, 2, 3],
    "R+LT": [3, 7],
    "(FE+M)^C": [0, 3, 4, 7],
    "(FE+M+LT)^C": [0, 3, 4],
    "ALL": list(range(8)),
    "NONE": [],
}


@pytest.mark.parametrize("expr", list(EXPECTED))
def test_position_expression_selects_expected_tokens(movie_prompt, expr):
    got = parse_positions(expr).evaluate(movie_prompt.positions, len(movie_prompt.input_ids))
    assert got == EXPECTED[expr]


@pytest.mark.parametrize("name", ["FE", "LT", "FE+LT", "(FE+LT)^C", "M", "other"])
def test_condition_row_mask_extends_last_token_to_target_tokens(movie_prompt, name):
    cond = resolve_condition(name, recipient="pre", donor="sft")
    n = len(movie_prompt.input_ids)
    ((mask, graft),) = cond.row_masks(movie_prompt.positions, n, n + 1)
    chosen = [i for i, m in enumerate(mask) if m]
    extra = [n] if n - 1 in EXPECTED[name] else []  # the teacher-forced target token
    assert chosen == EXPECTED[name] + extra
    # every weight at those positions (embeddings included), the recipient's head
    assert (graft.layers, graft.components, graft.donor) == ("all", ["WEIGHTS"], "sft")


def test_donor_unembedding_adds_lm_head_everywhere(movie_prompt):
    cond = resolve_condition("FE", recipient="pre", donor="sft", unembedding="donor")
    n = len(movie_prompt.input_ids)
    (fe_mask, fe), (head_mask, head) = cond.row_masks(movie_prompt.positions, n, n)
    assert [i for i, m in enumerate(fe_mask) if m] == [1, 2] and fe.components == ["WEIGHTS"]
    assert all(head_mask) and head.components == ["lm_head"] and head.layers == "all"


def test_r_never_contains_the_last_token():
    """A relation span reaching the last token (an older template) loses that token; a span of
    the last token alone leaves R not applicable."""
    expr = parse_positions("R")
    assert expr.evaluate({"relation": [3, 4, 5]}, 6) == [3, 4]
    with pytest.raises(NotApplicable, match="R"):
        expr.evaluate({"relation": [5]}, 6)


def test_component_condition_grafts_nothing_at_fe_and_components_at_lt(movie_prompt):
    cond = resolve_condition("O+FFN", recipient="b2a", donor="sft")
    n = len(movie_prompt.input_ids)
    ((lt_mask, lt),) = cond.row_masks(movie_prompt.positions, n, n)
    assert [i for i, m in enumerate(lt_mask) if m] == [7]
    assert (lt.layers, lt.components) == ("authors_fourth_quarter", ["o", "gate", "up", "down"])
    based = resolve_condition("O+FFN", recipient="pre", donor="sft", component_base="FE")
    assert [g.components for _, g in based.row_masks(movie_prompt.positions, n, n)] == [
        ["WEIGHTS"],
        ["o", "gate", "up", "down"],
    ]


def test_missing_role_is_not_applicable():
    tok = build_tokenizer()
    headline = next(p for p in make_prompts() if p.template_id == "paper_1")
    enc = encode_prompt(tok, headline)
    cond = resolve_condition("M+LT", recipient="pre", donor="sft")
    with pytest.raises(NotApplicable, match="M"):
        cond.row_masks(enc.positions, len(enc.input_ids), len(enc.input_ids))
    # `other` needs no particular role, so it stays applicable
    other = resolve_condition("other", recipient="pre", donor="sft")
    assert other.row_masks(enc.positions, len(enc.input_ids), len(enc.input_ids))


def test_layer_bands_follow_engine_semantics_and_the_authors_rule():
    assert concrete_layers("last_quarter", 8) == [6, 7]
    assert concrete_layers("last_quarter", 18) == [13, 14, 15, 16, 17]  # engine: 3*18//4 = 13
    assert concrete_layers("authors_fourth_quarter", 18) == list(range(12, 18))  # q = 4, 3q = 12
    assert concrete_layers("authors_third_and_fourth_quarters", 18) == list(range(8, 18))
    assert concrete_layers("authors_fourth_quarter", 26) == list(range(18, 26))
    assert concrete_layers("eighth_3", 16) == [4, 5]
    assert concrete_layers("first_half", 5) == [0, 1]
    assert concrete_layers([-1, 0], 4) == [0, 3]
    with pytest.raises(ValueError, match="outside"):
        concrete_layers(9, 4)


def _config(experiments):
    return base_config({"pre": "p", "sft": "s", "task": "t"}, "d", experiments)


def test_unknown_condition_is_named():
    bad = [{"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", "FE+XQ"]}]
    with pytest.raises(ConfigError, match="XQ") as err:
        parse_config(_config(bad))
    assert "FE+XQ" in str(err.value)


def test_unknown_field_is_named():
    bad = [
        {
            "name": "e",
            "dataset": "relation",
            "recipient": "pre",
            "donor": "sft",
            "conditons": ["PRE"],
            "conditions": ["PRE"],
        }
    ]
    with pytest.raises(ConfigError, match="unknown field 'conditons'"):
        parse_config(_config(bad))
    with pytest.raises(ConfigError, match="unknown field 'seeed'"):
        parse_config({**_config([{"preset": "position_grafting"}]), "seeed": 1})


def test_unknown_preset_component_and_model_key_are_named():
    with pytest.raises(ConfigError, match="position_graftin"):
        parse_config(_config([{"preset": "position_graftin"}]))
    bad = [
        {
            "name": "e",
            "dataset": "relation",
            "recipient": "pre",
            "donor": "sft",
            "conditions": [{"name": "x", "grafts": [{"positions": "LT", "components": "O+MLPX"}]}],
        }
    ]
    with pytest.raises(ConfigError, match="MLPX"):
        parse_config(_config(bad))
    with pytest.raises(ConfigError, match="'freetext'"):
        parse_config(_config([{"preset": "free_text"}]))


def test_presets_expand_in_paper_order():
    cfg = parse_config(
        _config([{"preset": "position_grafting"}, {"preset": "position_title"}, {"preset": "layer_sweeps"}])
    )
    exps = cfg.expanded()
    assert [e.name for e in exps] == ["position_grafting", "position_title", "layer_sweeps"]
    # `fidelity: both` (the default) on an untied Llama: the authors' rows and the clean ones
    # graft the same (no position embedding, no tied head), so each clean twin is dropped.
    llama = ModelFacts(adapter_for("llama").components, tied=False)
    conditions = experiment_conditions(exps[0], 8, llama)
    assert {c.fidelity for c in conditions[:8]} == {"authors = clean"}
    names = [c.name for c in conditions]
    assert names == [
        "PRE",
        "SFT",
        "FE",
        "LT",
        "FE+LT",
        "(FE+LT)^C",
        "FE^C",
        "LT^C",
        "FE [donor unembedding]",
        "LT [donor unembedding]",
        "FE+LT [donor unembedding]",
    ]
    # Without the model's facts the rows are compared as written: every position row differs
    # (AUTHORS_WEIGHTS against WEIGHTS), so its clean twin stays beside it.
    written = [c.name for c in experiment_conditions(exps[0], 8)]
    assert written[:5] == ["PRE", "SFT", "FE", "FE [clean]", "LT"]
    sweep = [c for c in experiment_conditions(exps[2], 8) if c.meta]
    assert len(sweep) == 2 * 4 * 4  # FE/LT x 4 component sets x quarters of 8 layers


def test_unembedding_option_only_where_it_means_something():
    cfg = parse_config(_config([{"preset": "position_grafting", "unembedding": "donor", "fidelity": "clean"}]))
    conds = {c.name: c for c in experiment_conditions(cfg.expanded()[0], 8)}
    assert [g.components for g in conds["FE+LT"].grafts] == [["WEIGHTS"], ["lm_head"]]
    assert [g.components for g in conds["FE+LT [recipient unembedding]"].grafts] == [["WEIGHTS"]]
    with pytest.raises(ConfigError, match="no `unembedding` option"):
        parse_config(_config([{"preset": "components_pre", "unembedding": "donor"}]))


def test_example_cap_is_seeded_and_keeps_every_template():
    prompts = make_prompts()
    a = select_examples(prompts, None, 6, seed=3, context="t")
    b = select_examples(prompts, None, 6, seed=3, context="t")
    assert [p.id for p in a] == [p.id for p in b]
    assert {p.template_id for p in a} == {"paper_1", "paper_2", "paper_3"}
    with pytest.raises(ValueError, match="nosuch"):
        select_examples(prompts, ["nosuch"], None, seed=0, context="t")


def test_a_config_says_attn_one_way_only():
    """The paper's ATTN is q, k, v; the engine's group `attn` adds o. A config refuses the
    engine's spelling (naming both ways to write it) instead of grafting o unasked."""
    from weightgraft.experiments.conditions.components import parse_components

    assert parse_components("ATTN") == ["q", "k", "v"]
    assert parse_components("ATTN+O") == ["q", "k", "v", "o"]
    with pytest.raises(ValueError, match=r"ambiguous component 'attn'.*ATTN \(q, k, v\) or ATTN\+O"):
        parse_components("attn+FFN")
    with pytest.raises(ValueError, match="ambiguous component 'attn'"):
        parse_components(["attn"])


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe"])
def test_ffn_on_a_moe_model_is_the_whole_block(model_type):
    """The paper's FFN on a MoE model is its engine group mlp (router, experts, shared expert);
    on a dense model it stays gate, up, down; a lone DOWN is left for the Graft to refuse."""
    from weightgraft.experiments.conditions.components import parse_components, resolve_for_model

    adapter = adapter_for(model_type)
    available = list(adapter.components)
    assert resolve_for_model(parse_components("FFN"), available) == list(adapter.group("mlp"))
    assert resolve_for_model(parse_components("O+FFN"), available) == ["o", *adapter.group("mlp")]
    assert "router" in adapter.group("mlp") and "experts" in adapter.group("mlp")
    assert resolve_for_model(parse_components("O+DOWN"), available) == ["o", "down"]
    dense = list(adapter_for("llama").components)
    assert resolve_for_model(parse_components("O+FFN"), dense) == ["o", "gate", "up", "down"]
