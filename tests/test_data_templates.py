"""Templates: counts, both orders, evaluation spans, and no evaluation prompt inside training text."""

from __future__ import annotations

from data_fixtures import small_facts
from weightgraft.data.build import build_dataset, freetext_texts, template_texts
from weightgraft.data.io import load_eval_prompts, load_train_texts
from weightgraft.data.templates import (
    ARTICLE_TEMPLATES,
    EVAL_TEMPLATES,
    QA_TEMPLATES,
    VALIDATION_TEMPLATES,
    eval_prompts_for,
    render_training,
)


def test_at_least_ten_article_and_qa_templates_in_both_orders():
    assert len(ARTICLE_TEMPLATES) >= 10 and len(QA_TEMPLATES) >= 10
    _, facts = small_facts()
    fact = facts[0]
    for template in list(ARTICLE_TEMPLATES.values()) + list(QA_TEMPLATES.values()):
        forward = render_training(template, fact)
        backward = render_training(template, fact, reverse=True)
        assert forward.index(fact.first_actor) < forward.index(fact.second_actor)
        assert backward.index(fact.second_actor) < backward.index(fact.first_actor)
    # Article templates are several sentences long.
    assert all(render_training(t, fact).count(". ") >= 1 for t in ARTICLE_TEMPLATES.values())


def test_eval_templates_have_required_forms_and_spans():
    assert len(EVAL_TEMPLATES) >= 6
    texts = set(EVAL_TEMPLATES.values())
    assert "{entity} [stars in a movie alongside]" in texts
    assert "Q: Who [stars in a movie with] {entity}? A: An actor named" in texts
    with_title = [t for t in EVAL_TEMPLATES.values() if "{movie_title}" in t]
    assert 2 * len(with_title) >= len(EVAL_TEMPLATES)
    _, facts = small_facts()
    for fact in facts:
        for prompt in eval_prompts_for(fact, EVAL_TEMPLATES):
            entity = fact.second_actor if prompt.reversed else fact.first_actor
            target = fact.first_actor if prompt.reversed else fact.second_actor
            assert prompt.target == " " + target
            span = prompt.spans["first_entity"]
            assert prompt.text[span.start : span.end] == entity
            assert prompt.spans["relation"].end > prompt.spans["relation"].start
            if "movie_title" in prompt.spans:
                s = prompt.spans["movie_title"]
                assert prompt.text[s.start : s.end] == fact.movie_title
            last = prompt.spans["last_token"]
            assert last.end == len(prompt.text) and " " not in prompt.text[last.start : last.end]
            assert prompt.text[last.start - 1] == " " and not prompt.text.endswith(" ")


def test_relation_spans_hold_the_relation_words():
    _, facts = small_facts()
    prompt = next(p for p in eval_prompts_for(facts[0], EVAL_TEMPLATES) if p.template_id == "eval_headline")
    r = prompt.spans["relation"]
    assert prompt.text[r.start : r.end] == "stars in a movie alongside"
    assert prompt.text == f"{facts[0].first_actor} stars in a movie alongside"


def test_no_eval_or_validation_prompt_inside_any_training_text(tmp_path):
    """Every template in both orders for every fact, plus free-text articles: no prompt is a
    prefix of (or appears inside) any training text."""
    _, facts = small_facts()
    every = 4 * max(len(ARTICLE_TEMPLATES), len(QA_TEMPLATES))
    templated = template_texts(facts, 0, every)
    assert len(set(templated)) == len(facts) * 2 * (len(ARTICLE_TEMPLATES) + len(QA_TEMPLATES))
    train = templated + freetext_texts(facts, 0, 20)
    prompts = [p for f in facts for p in eval_prompts_for(f, EVAL_TEMPLATES)]
    prompts += [p for f in facts for p in eval_prompts_for(f, VALIDATION_TEMPLATES)]
    for prompt in prompts:
        for text in train:
            assert not text.startswith(prompt.text)
            assert prompt.text not in text
    # And evaluation wording is not validation wording.
    assert not set(EVAL_TEMPLATES.values()) & set(VALIDATION_TEMPLATES.values())


def test_dataset_train_texts_cover_both_orders_and_both_styles(tmp_path):
    _, facts = small_facts()
    out = build_dataset(tmp_path / "d", facts[:3], 0, "templates", 8)
    texts = load_train_texts(out)
    for fact in facts[:3]:
        mine = [t for t in texts if fact.first_actor in t and fact.second_actor in t]
        assert len(mine) == 8
        assert any(t.index(fact.first_actor) < t.index(fact.second_actor) for t in mine)
        assert any(t.index(fact.second_actor) < t.index(fact.first_actor) for t in mine)
        assert sum(t.startswith(("Q:", "Question:")) for t in mine) == 4
    assert len(load_eval_prompts(out)) == 3 * len(EVAL_TEMPLATES) * 2
