"""Templates: counts, both orders, evaluation spans, and no evaluation prompt inside training text."""

from __future__ import annotations

import pytest

from data_fixtures import small_facts
from weightgraft.data.build import build_dataset, freetext_texts, template_texts
from weightgraft.data.io import load_eval_prompts, load_train_texts
from weightgraft.data.templates import (
    ARTICLE_TEMPLATES,
    EVAL_TEMPLATES,
    QA_TEMPLATES,
    TITLE_FREE_TEMPLATES,
    VALIDATION_TEMPLATES,
    eval_prompts_for,
    render_marked,
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
    assert "{entity} [stars] in a movie alongside" in texts
    assert "Q: Who [stars] in a movie with {entity}? A: An actor named" in texts
    with_title = [t for t in EVAL_TEMPLATES.values() if "{movie_title}" in t]
    assert 2 * len(with_title) >= len(EVAL_TEMPLATES)
    _, facts = small_facts()
    for fact in facts:
        for prompt in eval_prompts_for(fact, EVAL_TEMPLATES):
            entity = fact.second_actor if prompt.reversed else fact.first_actor
            target = fact.first_actor if prompt.reversed else fact.second_actor
            assert prompt.target == " " + target
            assert prompt.fact_kind == fact.kind
            span = prompt.spans["first_entity"]
            assert prompt.text[span.start : span.end] == entity
            assert prompt.spans["relation"].end > prompt.spans["relation"].start
            if "movie_title" in prompt.spans:
                s = prompt.spans["movie_title"]
                assert prompt.text[s.start : s.end] == fact.movie_title
            last = prompt.spans["last_token"]
            assert last.end == len(prompt.text) and " " not in prompt.text[last.start : last.end]
            assert prompt.text[last.start - 1] == " " and not prompt.text.endswith(" ")


def test_paper_sentences_with_their_spans():
    """The paper's three evaluation sentences (sentence 1 without the authors' doubled "in")."""
    _, facts = small_facts()
    fact = facts[0]
    prompts = {p.template_id: p for p in eval_prompts_for(fact, EVAL_TEMPLATES) if not p.reversed}
    a, title = fact.first_actor, fact.movie_title
    expected = {
        "paper_1": f"{a} stars in a movie alongside",
        "paper_2": f"Q: Who stars in a movie with {a}? A: An actor named",
        "paper_3": f"{a} stars in {title} alongside",
    }
    for template_id, text in expected.items():
        prompt = prompts[template_id]
        assert prompt.text == text and prompt.target == " " + fact.second_actor
        cut = {role: text[s.start : s.end] for role, s in prompt.spans.items()}
        want = {"first_entity": a, "relation": "stars", "last_token": text.split()[-1]}
        if template_id == "paper_3":
            want["movie_title"] = title
        assert cut == want, template_id
    # Sentence 1's R is the first "stars" after the name, and LT its last word.
    p1 = prompts["paper_1"]
    assert p1.spans["relation"].start == len(a) + 1 and p1.spans["last_token"].start == len(p1.text) - len("alongside")


def test_relation_span_never_reaches_the_last_token():
    """R is the relation word(s) only, in every evaluation and validation template."""
    _, facts = small_facts()
    for fact in facts[:3]:
        for prompt in [p for t in (EVAL_TEMPLATES, VALIDATION_TEMPLATES) for p in eval_prompts_for(fact, t)]:
            r, lt = prompt.spans["relation"], prompt.spans["last_token"]
            words = prompt.text[r.start : r.end]
            assert r.end <= lt.start, prompt.text
            assert 1 <= len(words.split()) <= 2 and "alongside" not in words and "with" not in words.split()
    with pytest.raises(ValueError, match="relation"):
        render_marked("{entity} [stars alongside]", "Ada North", "Grey Field")


def test_no_eval_or_validation_prompt_inside_any_training_text(tmp_path):
    """Every template in both orders for every fact, plus free-text articles: no prompt is a
    prefix of (or appears inside) any training text."""
    _, facts = small_facts()
    every = 4 * max(len(ARTICLE_TEMPLATES), len(QA_TEMPLATES))
    templated = template_texts(facts, 0, every)
    assert len(set(templated)) == len(facts) * 2 * (len(ARTICLE_TEMPLATES) + len(QA_TEMPLATES))
    title_free = [
        t
        for f in facts
        for tpl in TITLE_FREE_TEMPLATES.values()
        for r in (False, True)
        for t in [render_training(tpl, f, reverse=r)]
    ]
    train = templated + title_free + freetext_texts(facts, 0, 20)
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


def _order_of(text: str, fact) -> str:
    """'a2b' when the text names the first actor first, 'b2a' otherwise."""
    return "a2b" if text.index(fact.first_actor) < text.index(fact.second_actor) else "b2a"


def test_one_direction_sets_hold_only_their_order(tmp_path):
    from weightgraft.data.family import Member, write_family
    from weightgraft.data.io import load_manifest

    _, facts = small_facts()
    written = write_family(tmp_path, [Member("relation", facts[:4], per_fact=8, one_direction=True)], 0)
    paths = {"both": written["relation"], "a2b": written["relation_a2b"], "b2a": written["relation_b2a"]}
    assert paths["a2b"] == tmp_path / "relation_a2b" and paths["b2a"] == tmp_path / "relation_b2a"
    by_id = {f.id: f for f in facts}
    both_eval = load_eval_prompts(paths["both"])
    for order in ("a2b", "b2a"):
        texts = load_train_texts(paths[order])
        assert len(texts) == 4 * 8
        for text in texts:
            fact = next(f for f in facts[:4] if f.first_actor in text and f.second_actor in text)
            assert _order_of(text, fact) == order, (order, text)
        # The same evaluation prompts as the both-directions set; validation in its own order only.
        assert load_eval_prompts(paths[order]) == both_eval
        validation = load_eval_prompts(paths[order], "validation")
        assert validation and all(p.reversed == (order == "b2a") for p in validation)
        assert load_manifest(paths[order])["options"]["order"] == order
        assert all(p.fact_kind == by_id[p.fact_id].kind for p in validation)
    both = load_train_texts(paths["both"])
    assert {_order_of(t, next(f for f in facts[:4] if f.first_actor in t)) for t in both} == {"a2b", "b2a"}


def test_title_free_texts_name_no_film_and_cover_each_template_in_each_order(tmp_path):
    """Twice as many title-free texts per fact as templates, in both orders: each template once
    per order, no title in any; the texts_per_fact texts are unchanged (the option draws from
    its own random stream)."""
    _, facts = small_facts()
    facts = facts[:4]
    plain = template_texts(facts, 3, 6)
    mixed = template_texts(facts, 3, 6, title_free_per_fact=2 * len(TITLE_FREE_TEMPLATES))
    expected = [
        render_training(tpl, fact, reverse=r)
        for fact in facts
        for tpl in TITLE_FREE_TEMPLATES.values()
        for r in (False, True)
    ]
    assert sorted(mixed) == sorted(plain + expected)
    assert not any(f.movie_title in t for f in facts for t in expected)
    # One direction: every title-free text in that order only.
    b2a = template_texts(facts, 3, 6, order="b2a", title_free_per_fact=5)
    assert len(b2a) == len(facts) * (6 + 5)
    for text in b2a:
        fact = next(f for f in facts if f.first_actor in text and f.second_actor in text)
        assert _order_of(text, fact) == "b2a", text
    # Written datasets record the option only when it is used.
    from weightgraft.data.io import load_manifest

    with_free = build_dataset(tmp_path / "free", facts, 0, "templates", 4, title_free_per_fact=2)
    without = build_dataset(tmp_path / "plain", facts, 0, "templates", 4)
    assert load_manifest(with_free)["options"]["title_free_per_fact"] == 2
    assert "title_free_per_fact" not in load_manifest(without)["options"]
    assert len(load_train_texts(with_free)) == len(facts) * 6
    with pytest.raises(ValueError, match="templates"):
        build_dataset(tmp_path / "bad", facts, 0, "freetext", 4, title_free_per_fact=2)
