"""Seeded pools of fake names (from Faker's word lists) and fake film titles.

Everything here is drawn from a `random.Random` we own, so a seed fixes every name. Fake actors
get distinct first names within one pool, so the first token of a fake target names one actor.

A pool's first names come from Faker's US list (its seeded sample of `n_first`); when a factory
has given every one of them to an actor, it goes on through the pool's `extra_first_names`
(the rest of the US list and the first names of other Faker locales, in a seeded order), so
that 1000 fake/fake facts (2000 actors) get distinct first names and the facts drawn before
the base list runs out are the same as they were before the extension existed.
"""

from __future__ import annotations

import importlib
import random
from dataclasses import dataclass, field
from functools import lru_cache

from faker.providers.person.en_US import Provider as PersonProvider

from weightgraft.data import words
from weightgraft.data.data_errors import DataError
from weightgraft.data.real_entities import REAL_ACTORS, REAL_FILMS

# Draws before a name factory gives up on finding an unused name (then an error says what to change).
MAX_DRAWS = 10_000


@lru_cache(maxsize=1)
def _faker_name_lists() -> tuple[list[str], list[str]]:
    """Faker's US first and last names (its word lists only; the draw is ours and seeded)."""
    first = sorted({n for n in PersonProvider.first_names if n.isalpha() and n.isascii()})
    last = sorted({n for n in PersonProvider.last_names if n.isalpha() and n.isascii()})
    return first, last


# Faker locales whose first names extend a pool (Latin letters only are kept).
EXTRA_LOCALES = ("en_GB", "en_IE", "de_DE", "it_IT", "es_ES", "nl_NL", "sv_SE", "da_DK", "fi_FI", "ro_RO")


@lru_cache(maxsize=1)
def _extra_locale_first_names() -> list[str]:
    """First names of `EXTRA_LOCALES` that are plain ASCII words, sorted (order-free of Faker's)."""
    names: set[str] = set()
    for locale in EXTRA_LOCALES:
        provider = importlib.import_module(f"faker.providers.person.{locale}").Provider
        names |= {n for n in provider.first_names if n.isalpha() and n.isascii() and n[:1].isupper()}
    return sorted(names)


@dataclass
class NamePool:
    """A seeded choice of first and last names; every person the world or a dataset invents uses it."""

    seed: int
    n_first: int = 200
    n_last: int = 200
    first_names: list[str] = field(init=False)
    last_names: list[str] = field(init=False)
    extra_first_names: list[str] = field(init=False, repr=False)

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
        # Drawn from a generator of its own, so the base lists above are what they always were.
        chosen = set(self.first_names)
        extra = sorted({n for n in candidates + _extra_locale_first_names() if n not in chosen and n not in real_first})
        random.Random(f"names-extra-{self.seed}").shuffle(extra)
        self.extra_first_names = extra

    @property
    def max_unique_first(self) -> int:
        """How many actors can get first names no other actor of one factory has."""
        return len(self.first_names) + len(self.extra_first_names)


class NameFactory:
    """Draws collision-free full names and titles; remembers every one it has given out."""

    def __init__(self, pool: NamePool, rng: random.Random, forbidden: set[str] = frozenset()):
        self.pool = pool
        self.rng = rng
        self.used: set[str] = set(forbidden) | set(REAL_ACTORS) | {f.title for f in REAL_FILMS}
        self.used_first: set[str] = set()
        self._extra_cursor = 0

    def person(self, unique_first: bool = False) -> str:
        if unique_first and self.used_first.issuperset(self.pool.first_names):
            return self._person_with_extra_first()
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
        raise DataError("ran out of distinct fake names; use fewer facts or a larger name pool (n_first/n_last)")

    def _person_with_extra_first(self) -> str:
        """The next unused first name of the pool's extension (in its seeded order), with a
        seeded last name that makes a full name not given out before."""
        extra = self.pool.extra_first_names
        while self._extra_cursor < len(extra):
            first = extra[self._extra_cursor]
            self._extra_cursor += 1
            if first in self.used_first:
                continue
            for _ in range(len(self.pool.last_names)):
                name = f"{first} {self.rng.choice(self.pool.last_names)}"
                if name not in self.used:
                    self.used.add(name)
                    self.used_first.add(first)
                    return name
        raise DataError(
            f"ran out of distinct fake names: at most {self.pool.max_unique_first} fake actors with "
            f"first names of their own, i.e. {self.pool.max_unique_first // 2} fake_fake facts; ask for fewer"
        )

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
        raise DataError("ran out of distinct fake titles; use fewer facts")
