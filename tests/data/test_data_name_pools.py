"""Fake names at the paper's size: 1000 fake/fake facts with 2000 distinct actors and first names,
the same first facts as a smaller call, and one line naming the limit beyond it."""

from __future__ import annotations

from cli_runner import invoke, one_line_error
from weightgraft.data.facts import generate_facts, known_film_facts, max_fake_fake_facts
from weightgraft.data.names import NamePool


def fake_fake(seed: int, n: int):
    pool = NamePool(seed)
    return generate_facts({"fake_fake": n}, seed, pool, known_film_facts(seed, pool))


def test_a_thousand_fake_fake_facts_have_distinct_actors_and_first_names():
    facts = fake_fake(0, 1000)
    actors = [a for f in facts for a in (f.first_actor, f.second_actor)]
    assert len(facts) == 1000 and len(set(actors)) == 2000
    assert len({a.split()[0] for a in actors}) == 2000
    others = {name for f in facts for name in (f.director, f.main_character)}
    assert not others & set(actors)
    assert len({f.movie_title for f in facts}) == 1000


def test_larger_calls_begin_with_the_facts_of_smaller_ones_and_are_seeded():
    small, large = fake_fake(3, 60), fake_fake(3, 1000)
    assert large[:60] == small
    assert fake_fake(3, 1000) == large
    assert fake_fake(4, 1000)[:5] != large[:5]


def test_asking_beyond_the_name_lists_is_one_line_naming_the_maximum(tmp_path):
    most = max_fake_fake_facts(NamePool(0))
    assert most >= 1000
    line = one_line_error(invoke("data", "--out", tmp_path / "d", "--kinds", "fake_fake", "--facts-per-kind", most + 1))
    assert f"at most {most}" in line and "fake_fake" in line
    assert not (tmp_path / "d").exists()


def test_more_shuffled_facts_than_real_films_is_one_line(tmp_path):
    line = one_line_error(invoke("data", "--out", tmp_path / "d", "--kinds", "real_shuffled", "--facts-per-kind", 5000))
    assert "known films to shuffle" in line and "at most" in line
