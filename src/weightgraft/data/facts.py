"""Seeded generation of relation facts of every kind.

- `real_real`: our real films with their two leads (details such as director are generated).
- `real_shuffled`: a real film with two real actors who did not lead it, a new fact made of
  known entities.
- `fake_real`: a generated film with two real actors who never co-led a film in our list.
- `fake_fake`: a generated film with two generated actors.

Within one call every actor gets a first name no other actor of that call has (where the lists
allow), so the first token of a target names one answer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from weightgraft.data import words
from weightgraft.data.data_errors import DataError
from weightgraft.data.names import NameFactory, NamePool
from weightgraft.data.real_entities import REAL_ACTORS, REAL_FILMS, RealFilm
from weightgraft.data.schema import FactKind, RelationFact

KIND_PREFIX = {"fake_fake": "ff", "fake_real": "fr", "real_real": "rr", "real_shuffled": "rs"}
GENERATED_KINDS: tuple[FactKind, ...] = ("fake_fake", "fake_real", "real_shuffled")


def _details(rng: random.Random, factory: NameFactory) -> dict:
    return dict(
        main_character=factory.person(),
        release_year=rng.randint(*words.RELEASE_YEARS),
        genre=rng.choice(words.GENRES),
        city=rng.choice(words.CITIES),
        director=factory.person(),
        studio=rng.choice(words.STUDIOS),
    )


def known_film_facts(seed: int, pool: NamePool, films: Sequence[RealFilm] = REAL_FILMS) -> list[RelationFact]:
    """The real films as facts; generated details depend only on the seed and the title."""
    facts = []
    factory = NameFactory(pool, random.Random(f"known-{seed}"))
    for index, film in enumerate(films):
        rng = random.Random(f"known-{seed}-{film.title}")
        details = _details(rng, factory)
        details["release_year"] = film.year
        facts.append(
            RelationFact(
                id=f"rr-{index:04d}",
                kind="real_real",
                first_actor=film.lead,
                second_actor=film.co_lead,
                movie_title=film.title,
                **details,
            )
        )
    return facts


def select_known_films(seed: int, n_films: int, max_per_actor: int = 2) -> list[RealFilm]:
    """A seeded subset of our real films in which no actor leads more than `max_per_actor`."""
    rng = random.Random(f"films-{seed}")
    order = list(REAL_FILMS)
    rng.shuffle(order)
    counts: dict[str, int] = {}
    chosen = []
    for film in order:
        if counts.get(film.lead, 0) < max_per_actor and counts.get(film.co_lead, 0) < max_per_actor:
            chosen.append(film)
            counts[film.lead] = counts.get(film.lead, 0) + 1
            counts[film.co_lead] = counts.get(film.co_lead, 0) + 1
        if len(chosen) == n_films:
            return chosen
    raise ValueError(f"only {len(chosen)} films fit max_per_actor={max_per_actor}; ask for fewer")


def _pick_actor(rng: random.Random, actors: Sequence[str], used_first: set[str], exclude: set[str]) -> str:
    fresh = [a for a in actors if a not in exclude and a.split()[0] not in used_first]
    if not fresh:
        fresh = [a for a in actors if a not in exclude]
    if not fresh:
        raise DataError("not enough real actors for the facts asked; ask for fewer real-actor facts")
    actor = rng.choice(fresh)
    used_first.add(actor.split()[0])
    return actor


def max_fake_fake_facts(pool: NamePool) -> int:
    """The most fake_fake facts one call can make: each needs two actors with distinct first names."""
    return pool.max_unique_first // 2


def generate_facts(
    counts: dict[FactKind, int],
    seed: int,
    pool: NamePool,
    known: Sequence[RelationFact],
    real_actors: Sequence[str] = REAL_ACTORS,
    forbidden: set[str] = frozenset(),
) -> list[RelationFact]:
    """New facts (never true in `known`), interleaved by kind so any prefix mixes the kinds."""
    _check_counts(counts, pool, known)
    rng = random.Random(f"facts-{seed}")
    taken = set(forbidden)
    for fact in known:
        taken |= {fact.director, fact.main_character, fact.movie_title}
    factory = NameFactory(pool, rng, forbidden=taken)
    known_pairs = {frozenset((f.first_actor, f.second_actor)) for f in known}
    known_pairs |= {frozenset((f.lead, f.co_lead)) for f in REAL_FILMS}
    used_first: set[str] = set()
    shuffled_films = list(known)
    rng.shuffle(shuffled_films)
    known_actors = sorted({a for f in known for a in (f.first_actor, f.second_actor)})
    by_kind: dict[str, list[RelationFact]] = {}
    for kind, n in counts.items():
        made = []
        for index in range(n):
            fact_id = f"{KIND_PREFIX[kind]}-{index:04d}"
            if kind == "real_shuffled":
                if index >= len(shuffled_films):
                    raise DataError(f"only {len(shuffled_films)} known films to shuffle; ask for fewer")
                film = shuffled_films[index]
                cast = {film.first_actor, film.second_actor}
                while True:
                    first = _pick_actor(rng, known_actors, used_first, cast)
                    second = _pick_actor(rng, known_actors, used_first, cast | {first})
                    if frozenset((first, second)) not in known_pairs:
                        break
                made.append(film.model_copy(update=dict(id=fact_id, kind=kind, first_actor=first, second_actor=second)))
                continue
            if kind == "fake_fake":
                first = factory.person(unique_first=True)
                second = factory.person(unique_first=True)
            else:  # fake_real
                while True:
                    first = _pick_actor(rng, real_actors, used_first, set())
                    second = _pick_actor(rng, real_actors, used_first, {first})
                    if frozenset((first, second)) not in known_pairs:
                        break
            # The title and details are drawn after the actors, in this order, for every fake film.
            made.append(
                RelationFact(
                    id=fact_id,
                    kind=kind,
                    first_actor=first,
                    second_actor=second,
                    movie_title=factory.title(),
                    **_details(rng, factory),
                )
            )
        by_kind[kind] = made
    return _interleaved(counts, by_kind)


def _check_counts(counts: dict[FactKind, int], pool: NamePool, known: Sequence[RelationFact]) -> None:
    """Refuse kinds that cannot be generated and counts the name lists or known films cannot give."""
    for kind in counts:
        if kind not in GENERATED_KINDS:
            raise ValueError(f"cannot generate facts of kind {kind!r}; choose from {GENERATED_KINDS}")
    most = max_fake_fake_facts(pool)
    if counts.get("fake_fake", 0) > most:
        raise DataError(
            f"{counts['fake_fake']} fake_fake facts asked for, but our name lists give at most {most} "
            "(two fake actors with first names of their own per fact); ask for at most that"
        )
    if counts.get("real_shuffled", 0) > len(known):
        raise DataError(
            f"{counts['real_shuffled']} real_shuffled facts asked for, but there are only {len(known)} "
            "known films to shuffle; ask for at most that"
        )


def _interleaved(counts: dict[FactKind, int], by_kind: dict[str, list[RelationFact]]) -> list[RelationFact]:
    """One fact of each kind in turn (in `counts`' order), so any prefix mixes the kinds."""
    facts = []
    for index in range(max(counts.values(), default=0)):
        for kind in counts:
            if index < len(by_kind[kind]):
                facts.append(by_kind[kind][index])
    return facts
