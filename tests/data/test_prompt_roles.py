"""`weightgraft.Prompt` (issue 39, item 1): a prompt's roles from the tokenizer's offsets, the same
as the runner's for a dataset row and for the same prompt given as text and entity strings; role
expressions evaluated by the condition language's own code; `Graft(positions="FE+LT")` on prompts
(padded batches included) grafting exactly the runner's positions; clear errors."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from training_fixtures import tiny_artifacts
from weightgraft import Graft, Grafter, Prompt
from weightgraft.data.encode import encode_scored_prompt
from weightgraft.data.prompt import RoleError
from weightgraft.data.schema import EvalPrompt
from weightgraft.experiments.conditions import NotApplicable, resolve_condition
from weightgraft.experiments.conditions.components import resolve_for_model
from weightgraft.experiments.example_rows import Example
from weightgraft.experiments.methods.chunk_method import Row
from weightgraft.experiments.methods.weight_grafting import WeightGrafting

EXPRESSIONS = ["FE", "LT", "FE+LT", "(FE+LT)^C", "R", "R+LT", "other", "FE^C", "ALL"]


@lru_cache(maxsize=1)
def _world():
    art = tiny_artifacts()
    tok = AutoTokenizer.from_pretrained(art.pretrained)
    rows = [
        EvalPrompt.model_validate(json.loads(line))
        for line in (art.relation_data / "eval.jsonl").read_text().splitlines()
    ]
    return art, tok, rows


def _runner_example(tok, row: EvalPrompt) -> Example:
    """The runner's example of a row, as `plan.build.encode_examples` makes it."""
    enc = encode_scored_prompt(tok, row)
    positions = {str(k): list(v) for k, v in enc.positions.items()}
    return Example(row, list(enc.input_ids), list(enc.target_ids), positions, enc.scored)


def _runner_positions(example: Example, expr: str) -> list[int] | None:
    """The positions the runner's condition `expr` grafts on a row (None: not applicable)."""
    condition = resolve_condition(expr, recipient="pre", donor="sft")
    n = len(example.input_ids)
    try:
        masks = condition.row_masks(example.positions, n, n)
    except NotApplicable:
        return None
    return [i for i, on in enumerate(masks[0][0]) if on] if masks else []


def test_a_rows_roles_and_every_expression_match_the_runner():
    _, tok, rows = _world()
    checked = 0
    for row in rows[:40]:
        prompt, example = Prompt.from_row(tok, row), _runner_example(tok, row)
        assert prompt.input_ids == example.input_ids
        for expr in EXPRESSIONS:
            expected = _runner_positions(example, expr)
            if expected is None:
                with pytest.raises(NotApplicable):
                    prompt.positions(expr)
                continue
            assert prompt.positions(expr) == expected, (row.id, expr)
            checked += 1
    assert checked > 200


def test_text_and_entity_strings_give_the_rows_roles():
    _, tok, rows = _world()
    for row in rows[:20]:
        spans = row.spans
        first = row.text[spans["first_entity"].start : spans["first_entity"].end]
        relation = row.text[spans["relation"].start : spans["relation"].end] if "relation" in spans else None
        prompt = Prompt(tok, row.text, first_entity=first, relation=relation)
        from_row = Prompt.from_row(tok, row)
        assert prompt.input_ids == from_row.input_ids
        for role in ("first_entity", "relation", "last_token"):
            assert prompt.roles.get(role) == from_row.roles.get(role), (row.id, role)


def test_an_entity_not_in_the_text_is_a_clear_error():
    _, tok, _ = _world()
    with pytest.raises(RoleError, match=r"movie='The Matrix' is not in its text .*pass the entity exactly"):
        Prompt(tok, "Keanu Reeves stars in a movie alongside", first_entity="Keanu Reeves", movie="The Matrix")


def test_role_grafts_on_prompts_need_roles_and_the_role():
    art, tok, rows = _world()
    pre = AutoModelForCausalLM.from_pretrained(art.pretrained)
    sft = AutoModelForCausalLM.from_pretrained(art.relation_model)
    grafter = Grafter(pre, sft)
    prompt = Prompt.from_row(tok, rows[0])
    with pytest.raises(ValueError, match="bare token ids; pass prompts with roles"):
        grafter.logits(torch.tensor([prompt.input_ids]), grafts=Graft("FE+LT"))
    with pytest.raises(ValueError, match=r"Graft positions 'M': role M \(movie_title\) is absent"):
        grafter.logits(prompt, grafts=Graft("M"))
    with pytest.raises(ValueError, match="got the string 'lats'.*unknown position 'lats'"):
        Graft("lats")


@torch.no_grad()
def test_role_grafts_equal_the_runners_rows_on_a_padded_batch():
    """Each expression's every-weight graft on a batch of prompts of several lengths (padded on
    the left by the Grafter, and on the right by `Prompt.batch`) equals the runner's own rows
    (`WeightGrafting` on the condition's masks) at the prompt's last token."""
    art, tok, rows = _world()
    pre = AutoModelForCausalLM.from_pretrained(art.pretrained)
    sft = AutoModelForCausalLM.from_pretrained(art.relation_model)
    grafter = Grafter(pre, sft)
    chosen = sorted(rows[:60], key=lambda r: len(r.text))[::12][:5]
    prompts = [Prompt.from_row(tok, r) for r in chosen]
    assert len({len(p.input_ids) for p in prompts}) > 1
    examples = [_runner_example(tok, r) for r in chosen]
    tied = bool(pre.config.tie_word_embeddings)
    every = resolve_for_model(["WEIGHTS"], grafter.components, tied)
    runner = WeightGrafting(grafter, ("sft",), tied, 0, "cpu")
    largest = 0.0
    for expr in ("FE+LT", "(FE+LT)^C", "R", "other"):
        condition = resolve_condition(expr, recipient="pre", donor="sft")
        runner_rows = [
            Row(
                i,
                condition,
                condition.row_masks(e.positions, len(e.input_ids), len(e.input_ids) + len(e.target_ids) - 1),
            )
            for i, e in enumerate(examples)
        ]
        expected = runner.logits(examples, runner_rows)[0][:, 0]
        graft = Graft(expr, "all", every)
        for inputs in (prompts, Prompt.batch(prompts, padding_side="right")):
            got = grafter.last_logits(inputs, grafts=graft)
            largest = max(largest, (got - expected).abs().max().item())
        assert not torch.allclose(expected, grafter.last_logits(prompts), atol=1e-3), expr
    print(f"largest difference API vs runner: {largest:.2e}")
    assert largest < 1e-4, largest
