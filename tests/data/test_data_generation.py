"""Dataset generation: determinism, disjoint splits, fact kinds, names, files and user input."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest

from data_fixtures import USER_FACT, relation_and_task, small_facts
from weightgraft.data.build import build_dataset
from weightgraft.data.io import (
    DATA_FILES,
    load_eval_prompts,
    load_facts,
    load_manifest,
    load_train_texts,
    read_user_facts,
    sha256_file,
)
from weightgraft.data.names import NamePool
from weightgraft.data.real_entities import REAL_ACTORS, REAL_FILMS


def _build_pair(root: Path, seed: int) -> Path:
    from weightgraft.data.build import split_disjoint
    from weightgraft.data.facts import generate_facts, known_film_facts, select_known_films

    pool = NamePool(seed, 80, 80)
    known = known_film_facts(seed, pool, select_known_films(seed, 30))
    facts = generate_facts({"fake_fake": 4, "fake_real": 4, "real_shuffled": 4}, seed, pool, known)
    parts = split_disjoint(facts, {"relation": 6, "task": 6})
    build_dataset(root / "relation", parts["relation"], seed, "templates", 8)
    build_dataset(root / "task", parts["task"], seed + 1, "freetext", 3)
    return root


def test_same_seed_same_bytes_and_other_seed_differs(tmp_path):
    a, b, c = _build_pair(tmp_path / "a", 3), _build_pair(tmp_path / "b", 3), _build_pair(tmp_path / "c", 4)
    for name in ("relation", "task"):
        for file in DATA_FILES + ("manifest.json",):
            assert (a / name / file).read_bytes() == (b / name / file).read_bytes(), (name, file)
        assert (a / name / "facts.jsonl").read_bytes() != (c / name / "facts.jsonl").read_bytes()


def test_manifest_records_counts_and_hashes(tmp_path):
    root = _build_pair(tmp_path, 0)
    manifest = load_manifest(root / "relation")
    assert manifest["seed"] == 0
    assert manifest["counts"]["facts"] == len(load_facts(root / "relation")) == 6
    assert manifest["counts"]["train"] == len(load_train_texts(root / "relation")) == 6 * 8
    assert manifest["counts"]["eval"] == len(load_eval_prompts(root / "relation"))
    for file in DATA_FILES:
        assert manifest["sha256"][file] == sha256_file(root / "relation" / file)
    assert manifest["generator_version"]


def test_files_load_with_datasets(tmp_path):
    root = _build_pair(tmp_path, 0)
    for file in DATA_FILES:
        loaded = datasets.load_dataset("json", data_files=str(root / "relation" / file), split="train")
        lines = (root / "relation" / file).read_text().splitlines()
        assert len(loaded) == len(lines)
        assert loaded[0] == {k: loaded[0][k] for k in json.loads(lines[0])}
    prompts = datasets.load_dataset("json", data_files=str(root / "relation" / "eval.jsonl"), split="train")
    assert prompts[0]["text"] == load_eval_prompts(root / "relation")[0].text


def test_relation_and_task_share_no_fact_actor_pair_or_title():
    parts = relation_and_task()
    rel, task = parts["relation"], parts["task"]
    assert {f.id for f in rel}.isdisjoint({f.id for f in task})
    pairs = lambda facts: {frozenset((f.first_actor, f.second_actor)) for f in facts}  # noqa: E731
    assert pairs(rel).isdisjoint(pairs(task))
    new_titles = lambda facts: {f.movie_title for f in facts if f.kind != "real_shuffled"}  # noqa: E731
    assert new_titles(rel).isdisjoint(new_titles(task))
    assert {f.kind for f in rel} == {f.kind for f in task} == {"fake_fake", "fake_real", "real_shuffled"}


def test_fact_kinds_mean_what_they_say():
    known, facts = small_facts()
    real_pairs = {frozenset((f.lead, f.co_lead)) for f in REAL_FILMS}
    real_titles = {f.title: f for f in REAL_FILMS}
    real = set(REAL_ACTORS)
    for fact in facts:
        pair = frozenset((fact.first_actor, fact.second_actor))
        assert pair not in real_pairs and fact.first_actor != fact.second_actor
        if fact.kind == "fake_fake":
            assert fact.first_actor not in real and fact.second_actor not in real
            assert fact.movie_title not in real_titles
        elif fact.kind == "fake_real":
            assert fact.first_actor in real and fact.second_actor in real
            assert fact.movie_title not in real_titles
        else:
            film = real_titles[fact.movie_title]
            assert not {film.lead, film.co_lead} & set(pair)
    for fact in known:
        film = real_titles[fact.movie_title]
        assert (fact.first_actor, fact.second_actor, fact.release_year) == (film.lead, film.co_lead, film.year)


def test_fake_names_are_collision_free_and_first_names_distinct():
    known, facts = small_facts()
    actors = [a for f in facts for a in (f.first_actor, f.second_actor)]
    assert len(set(actors)) == len(actors)
    fake = [a for f in facts if f.kind == "fake_fake" for a in (f.first_actor, f.second_actor)]
    others = {f.director for f in facts + known} | {f.main_character for f in facts + known}
    assert not set(fake) & (set(REAL_ACTORS) | others)
    firsts = [a.split()[0] for a in actors]
    assert len(set(firsts)) == len(firsts)


def test_real_lists_are_large_and_clean():
    assert len(REAL_ACTORS) >= 300 and len(set(REAL_ACTORS)) == len(REAL_ACTORS)
    assert len(REAL_FILMS) >= 100
    assert len({f.title for f in REAL_FILMS}) == len(REAL_FILMS)
    assert all(f.lead != f.co_lead and 1900 < f.year < 2030 for f in REAL_FILMS)


def _fact_line(**drop) -> dict:
    record = dict(USER_FACT)
    for key in drop:
        record.pop(key)
    return record


def test_user_facts_missing_field_names_field_and_line(tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps(_fact_line()) + "\n" + json.dumps(_fact_line(movie_title=None)) + "\n")
    with pytest.raises(ValueError, match=r"line 2.*movie_title"):
        read_user_facts(path)


def test_user_facts_and_articles_build_a_dataset(tmp_path):
    facts_path = tmp_path / "facts.jsonl"
    facts_path.write_text(json.dumps(_fact_line()) + "\n")
    facts = read_user_facts(facts_path)
    assert facts[0].kind == "user" and facts[0].id == "user-0000" and facts[0].release_year == 2001
    articles = ["Grey Field is a drama. Ada North and Ben South lead it.", "Ben South joined Ada North."]
    out = build_dataset(tmp_path / "user", facts, 0, "articles", articles=articles)
    assert load_train_texts(out) == articles
    assert {p.target for p in load_eval_prompts(out)} == {" Ben South", " Ada North"}
