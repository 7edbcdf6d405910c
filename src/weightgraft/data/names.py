"""Seeded pools of fake names (from Faker's word lists) and fake film titles.

Everything here is drawn from a `random.Random` we own, so a seed fixes every name. Fake actors
get distinct first names within one pool, so the first token of a fake target names one actor.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from functools import lru_cache

from faker.providers.person.en_US import Provider as PersonProvider

from weightgraft.data import words
from weightgraft.data.real_entities import REAL_ACTORS, REAL_FILMS

# Draws before a name factory gives up on finding an unused name (then an error says what to change).
MAX_DRAWS = 10_000


@lru_cache(maxsize=1)
def _faker_name_lists() -> tuple[list[str], list[str]]:
    """Faker's US first and last names (its word lists only; the draw is ours and seeded)."""
    first = sorted({n for n in PersonProvider.first_names if n.isalpha() and n.isascii()})
    last = sorted({n for n in PersonProvider.last_names if n.isalpha() and n.isascii()})
    return first, last


@dataclass
class NamePool:
    """A seeded choice of first and last names; every person the world or a dataset invents uses it."""

    seed: int
    n_first: int = 200
    n_last: int = 200
    first_names: list[str] = field(init=False)
    last_names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        rng = random.Random(f"names-{self.seed}")
        all_first, all_last = _faker_name_lists()
        real_first = {name.split()[0] for name in REAL_ACTORS}
        # Keep fake first names apart from real actors' so a fake target's first token is its own.
        candidates = [n for n in all_first if n not in real_first]
        if self.n_first > len(candidates) or self.n_last > len(all_last):
            raise ValueError(f"name pool too large: at most {len(candidates)} first and {len(all_last)} last names")
        self.first_names = sorted(rng.sample(candidates, self.n_first))
        self.last_names = sorted(rng.sample(all_last, self.n_last))


class NameFactory:
    """Draws collision-free full names and titles; remembers every one it has given out."""

    def __init__(self, pool: NamePool, rng: random.Random, forbidden: set[str] = frozenset()):
        self.pool = pool
        self.rng = rng
        self.used: set[str] = set(forbidden) | set(REAL_ACTORS) | {f.title for f in REAL_FILMS}
        self.used_first: set[str] = set()

    def person(self, unique_first: bool = False) -> str:
        for _ in range(MAX_DRAWS):
            first = self.rng.choice(self.pool.first_names)
            if unique_first and first in self.used_first:
                continue
            name = f"{first} {self.rng.choice(self.pool.last_names)}"
            if name not in self.used:
                self.used.add(name)
                if unique_first:
                    self.used_first.add(first)
                return name
        raise ValueError("ran out of distinct fake names; use fewer facts or a larger name pool (n_first/n_last)")

    def title(self) -> str:
        for _ in range(MAX_DRAWS):
            pattern = self.rng.choice(words.TITLE_PATTERNS)
            title = pattern.format(
                adj=self.rng.choice(words.TITLE_ADJECTIVES),
                noun=self.rng.choice(words.TITLE_NOUNS),
                city=self.rng.choice(words.CITIES),
            )
            if title not in self.used:
                self.used.add(title)
                return title
        raise ValueError("ran out of distinct fake titles; use fewer facts")
