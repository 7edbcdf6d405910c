"""A dataset family: the dataset directories one job writes side by side, built in one place.

`weightgraft data`, the built-in models' build and `weightgraft reproduce` each describe their
family as a list of `Member`s (which facts, which training text) and call `write_family`. The
seed rule is the family's, not the caller's: member `i` is written with `seed + i`, and a
member's one-direction siblings (`NAME_a2b`, `NAME_b2a`) share its seed, so that the same
members in the same order give the same bytes whoever writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from weightgraft.data.build import ONE_DIRECTION, Order, build_dataset, split_disjoint
from weightgraft.data.errors import DataError
from weightgraft.data.facts import GENERATED_KINDS, generate_facts, known_film_facts
from weightgraft.data.io import read_user_articles, read_user_facts
from weightgraft.data.names import NamePool
from weightgraft.data.schema import RelationFact

Style = Literal["templates", "freetext", "articles"]
KINDS_HELP = "comma-separated kinds: fake_fake, fake_real, real_shuffled (real_real: the known films)"


@dataclass(frozen=True)
class Member:
    """One dataset of a family (see `build_dataset` for the styles and orders).

    `per_fact`: training texts per fact (templates) or generated articles per fact (freetext).
    `one_direction`: also write `NAME_a2b` and `NAME_b2a` beside `NAME` (templates only): the
    same facts and evaluation prompts, training texts in one order only."""

    name: str
    facts: list[RelationFact]
    style: Style = "templates"
    per_fact: int = 16
    order: Order = "both"
    one_direction: bool = False
    articles: list[str] | None = None  # style "articles": the user's training texts
    extra_options: dict | None = None  # recorded in the manifest's options


def member_names(member: Member) -> list[str]:
    """The directory names a member writes: its own, then its one-direction siblings."""
    siblings = [f"{member.name}_{order}" for order in ONE_DIRECTION] if member.one_direction else []
    return [member.name, *siblings]


def _write_member(directory: Path, member: Member, seed: int) -> dict[str, Path]:
    """`member` (and its one-direction siblings) written under `directory` with `seed`."""
    orders: list[Order] = [member.order, *(ONE_DIRECTION if member.one_direction else ())]
    written = {}
    for name, order in zip(member_names(member), orders, strict=True):
        written[name] = build_dataset(
            directory / name,
            member.facts,
            seed,
            member.style,
            member.per_fact,
            articles=member.articles,
            extra_options=member.extra_options,
            order=order,
        )
    return written


def write_family(directory: str | Path, members: Sequence[Member], seed: int) -> dict[str, Path]:
    """Write every member under `directory` (member `i` with `seed + i`); each dataset directory
    is written atomically. Returns each written directory by name. Names must be distinct."""
    names = [name for member in members for name in member_names(member)]
    if len(set(names)) != len(names):
        raise ValueError(f"a dataset family names a directory twice: {sorted(names)}")
    written: dict[str, Path] = {}
    for offset, member in enumerate(members):
        written.update(_write_member(Path(directory), member, seed + offset))
    return written


def user_members(facts_file: Path, articles_file: Path | None, texts_per_fact: int) -> list[Member]:
    """`weightgraft data --user-facts`: the set `user` from the user's facts, trained on their
    articles when given, else on template texts in both orders (with its one-direction sets)."""
    facts = read_user_facts(facts_file)
    if articles_file is None:
        return [Member("user", facts, per_fact=texts_per_fact, one_direction=True)]
    articles = read_user_articles(articles_file)
    return [Member("user", facts, "articles", articles=articles, extra_options={"articles": str(articles_file)})]


def generated_members(
    seed: int,
    kinds: list[str],
    facts_per_kind: int,
    sizes: dict[str, int],
    known: int,
    texts_per_fact: int,
    articles_per_fact: int,
) -> list[Member]:
    """`weightgraft data`: `facts_per_kind` generated facts of each kind, cut into disjoint sets
    of `sizes` (relation, task, freetext; the relation set with its one-direction sets; a set of
    size 0 is left out), and `known` of our real films when asked."""
    sizes = {name: n for name, n in sizes.items() if n}
    bad = [k for k in kinds if k not in GENERATED_KINDS]
    if bad or not kinds:
        raise DataError(f"--kinds: unknown or no kind(s) {bad}; {KINDS_HELP}")
    pool = NamePool(seed)
    known_facts = known_film_facts(seed, pool)
    if known > len(known_facts):
        raise DataError(f"--known: only {len(known_facts)} real films in our list; ask for at most that")
    facts = generate_facts({k: facts_per_kind for k in kinds}, seed, pool, known_facts)
    if sum(sizes.values()) > len(facts):
        raise DataError(
            f"the sets ask for {sum(sizes.values())} facts, but --facts-per-kind "
            f"{facts_per_kind} x {len(kinds)} kind(s) gives {len(facts)}; raise --facts-per-kind"
        )
    parts = split_disjoint(facts, sizes)
    if known:
        parts["known"] = known_facts[:known]
    return [
        Member(name, part, "freetext", articles_per_fact)
        if name == "freetext"
        else Member(name, part, per_fact=texts_per_fact, one_direction=name == "relation")
        for name, part in parts.items()
    ]
