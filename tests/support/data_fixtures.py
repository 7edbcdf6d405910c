"""Small generated datasets shared by the data tests (module-level cache keeps them cheap)."""

from __future__ import annotations

from functools import lru_cache

from weightgraft.data.build import split_disjoint
from weightgraft.data.facts import generate_facts, known_film_facts, select_known_films
from weightgraft.data.names import NamePool
from weightgraft.data.schema import RelationFact


@lru_cache(maxsize=4)
def small_facts(seed: int = 0, per_kind: int = 6) -> tuple[list[RelationFact], list[RelationFact]]:
    """(known films, new facts of the three generated kinds)."""
    pool = NamePool(seed, 80, 80)
    known = known_film_facts(seed, pool, select_known_films(seed, 30))
    facts = generate_facts({"fake_fake": per_kind, "fake_real": per_kind, "real_shuffled": per_kind}, seed, pool, known)
    return known, facts


def relation_and_task(seed: int = 0) -> dict[str, list[RelationFact]]:
    _, facts = small_facts(seed)
    return split_disjoint(facts, {"relation": 9, "task": 9})


# One user-facts record (a fact as `weightgraft data --user-facts` reads it), and a second one
# with other names, for tests of the user-facts reader and command.
USER_FACT = {
    "first_actor": "Ada North",
    "second_actor": "Ben South",
    "movie_title": "Grey Field",
    "main_character": "Cora West",
    "release_year": 2001,
    "genre": "drama",
    "city": "Oslo",
    "director": "Dan East",
    "studio": "Small Studio",
}
OTHER_USER_FACT = {**USER_FACT, "first_actor": "Eve Stone", "second_actor": "Finn Lake", "movie_title": "Red Road"}
