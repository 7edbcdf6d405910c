"""The held-out plain facts of the reproduce report: built on the model (the candidates PRE answers
at top-1) and scored by another model, against ranks computed here from the models' own logits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from training_fixtures import tiny_home
from weightgraft.data.io import load_eval_prompts
from weightgraft.paper.plain_fact_list import plain_fact_candidates
from weightgraft.paper.plain_facts import HeldOutKnowledge, held_out_knowledge, kept_knowledge
from weightgraft.paper.reproduce_sections import plain_facts_section
from weightgraft.training.builtin import ensure_builtin


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """The tiny pretrained model, and a copy whose layers got noise (it forgets some facts)."""
    art = ensure_builtin("tiny", home=tiny_home(), progress=False, finetunes=False)
    damaged = tmp_path_factory.mktemp("damaged")
    net = AutoModelForCausalLM.from_pretrained(art.pretrained)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, weight in net.named_parameters():
            if ".layers." in name and weight.dim() == 2:
                weight.add_(0.4 * weight.std() * torch.randn(weight.shape, generator=generator))
    net.save_pretrained(damaged)
    AutoTokenizer.from_pretrained(art.pretrained).save_pretrained(damaged)
    return {"pre": str(art.pretrained), "damaged": str(damaged), "known": str(art.known_data)}


def _candidates(known: str) -> list[tuple[str, str]]:
    """The tiny world's real films and their leads: facts its pretrained model partly knows."""
    return [(p.text, p.target) for p in load_eval_prompts(Path(known), "eval")]


def _first_token_ranks(path: str, facts: list[tuple[str, str]]) -> list[int]:
    tokenizer, net = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()
    ranks = []
    for prompt, answer in facts:
        ids = tokenizer(prompt)["input_ids"]
        target = tokenizer(prompt + answer)["input_ids"][len(ids)]
        with torch.no_grad():
            logits = net(input_ids=torch.tensor([ids])).logits[0, -1]
        ranks.append(int((logits > logits[target]).sum()) + 1)
    return ranks


def test_the_held_out_set_is_what_pre_knows_and_the_scores_match_the_logits(models):
    candidates = _candidates(models["known"])
    facts, scores, unasked = kept_knowledge({"pre": models["pre"], "damaged": models["damaged"]}, candidates)
    assert unasked == 0
    pre_ranks = _first_token_ranks(models["pre"], candidates)
    assert facts == [c for c, r in zip(candidates, pre_ranks, strict=True) if r == 1]
    assert 0 < len(facts) < len(candidates), "the tiny model should know some films, not all"
    pre, damaged = scores
    assert (pre.top1, pre.top1_interval, pre.top5) == (1.0, (1.0, 1.0), 1.0)
    ranks = _first_token_ranks(models["damaged"], facts)
    assert damaged.top1 == pytest.approx(sum(r == 1 for r in ranks) / len(facts))
    assert damaged.top5 == pytest.approx(sum(r <= 5 for r in ranks) / len(facts))
    assert damaged.top1 < 1.0, "the noise should cost some facts"
    low, high = damaged.top1_interval
    assert 0.0 <= low <= damaged.top1 <= high <= 1.0 and low < high


def test_the_report_section_prints_each_model_with_its_interval(models):
    candidates = _candidates(models["known"])
    knowledge = held_out_knowledge({"pre": models["pre"], "damaged": models["damaged"]}, candidates)
    assert HeldOutKnowledge.from_record(json.loads(json.dumps(knowledge.record()))) == knowledge
    assert knowledge.candidates == len(candidates) and knowledge.unasked == 0
    lines = plain_facts_section(knowledge)
    _, scores, _ = kept_knowledge({"pre": models["pre"], "damaged": models["damaged"]}, candidates)
    assert knowledge.scores == scores
    assert f"the pretrained model answers {len(knowledge.facts)} at top-1" in " ".join(lines)
    row = next(line for line in lines if line.startswith("| damaged |"))
    d = scores[1]
    assert f"{d.top1:.2f} [{d.top1_interval[0]:.2f}, {d.top1_interval[1]:.2f}]" in row
    assert next(line for line in lines if line.startswith("| pre |")).startswith("| pre | 1.00 [1.00, 1.00]")


def test_the_shipped_candidates_are_plain_and_distinct():
    candidates = plain_fact_candidates()
    assert len(candidates) >= 100 and len(set(candidates)) == len(candidates)
    assert all(answer.startswith(" ") and not prompt.endswith(" ") for prompt, answer in candidates)


def test_a_job_without_the_check_says_it_was_not_measured():
    lines = plain_facts_section(None)
    assert "Not measured" in lines[-1]
