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
from weightgraft.data.data_errors import DataError
from weightgraft.data.facts import GENERATED_KINDS, generate_facts, known_film_facts
from weightgraft.data.io import read_user_articles, read_user_facts
from weightgraft.data.names import NamePool
from weightgraft.data.schema import RelationFact
from weightgraft.folder_install import atomic_directory
from weightgraft.folder_ownership import refuse_nonempty

Style = Literal["templates", "freetext", "articles"]
KINDS_HELP = "comma-separated kinds: fake_fake, fake_real, real_shuffled (real_real: the known films)"


@dataclass(frozen=True)
class Member:
    """One dataset of a family (see `build_dataset` for the styles and orders).

    `per_fact`: training texts per fact (templates) or generated articles per fact (freetext).
    `one_direction`: also write `NAME_a2b` and `NAME_b2a` beside `NAME` (templates only): the
    same facts and evaluation prompts, training texts in one order only.
    `title_free`: title-free texts per fact besides `per_fact` (templates only; see
    `TITLE_FREE_TEMPLATES`)."""

    name: str
    facts: list[RelationFact]
    style: Style = "templates"
    per_fact: int = 16
    order: Order = "both"
    one_direction: bool = False
    articles: list[str] | None = None  # style "articles": the user's training texts
    extra_options: dict | None = None  # recorded in the manifest's options
    title_free: int = 0


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
            title_free_per_fact=member.title_free,
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


@dataclass(frozen=True)
class DataRequest:
    """The datasets `weightgraft data` is asked for (its options, named alike): generated facts
    of `kinds` (`facts_per_kind` each), split into the relation, task and free-text sets; or, with
    `user_facts`, a user's own facts (and with `articles` their own training articles)."""

    seed: int = 0
    kinds: str = "fake_fake,fake_real,real_shuffled"
    facts_per_kind: int = 30
    relation: int = 30
    task: int = 30
    freetext: int = 0
    texts_per_fact: int = 16
    articles_per_fact: int = 8
    known: int = 0
    user_facts: Path | None = None
    articles: Path | None = None


def check_request(request: DataRequest) -> None:
    """Every count in range and `articles` only with `user_facts`; DataError naming the option."""
    minimums = {
        "relation": (request.relation, 1),
        "task": (request.task, 0),
        "freetext": (request.freetext, 0),
        "known": (request.known, 0),
        "facts-per-kind": (request.facts_per_kind, 1),
        "texts-per-fact": (request.texts_per_fact, 2),
        "articles-per-fact": (request.articles_per_fact, 1),
    }
    for name, (value, minimum) in minimums.items():
        if value < minimum:
            what = "a positive number" if minimum == 1 else f"at least {minimum}"
            raise DataError(f"--{name} must be {what} (got {value})")
    if request.articles is not None and request.user_facts is None:
        raise DataError("--articles needs --user-facts (the facts the articles state, for evaluation)")


def request_members(request: DataRequest) -> list[Member]:
    """The family a request describes: the user's set, or the generated sets."""
    if request.user_facts is not None:
        return user_members(request.user_facts, request.articles, request.texts_per_fact)
    chosen = [k.strip() for k in request.kinds.split(",") if k.strip()]
    sizes = {"relation": request.relation, "task": request.task, "freetext": request.freetext}
    return generated_members(
        request.seed,
        chosen,
        request.facts_per_kind,
        sizes,
        request.known,
        request.texts_per_fact,
        request.articles_per_fact,
    )


def write_datasets(request: DataRequest, out: Path, overwrite: bool = False) -> list[tuple[str, int]]:
    """`weightgraft data`'s work: check `request` (before any work), then write its family into
    `out` in one atomic step (a non-empty `out` only with `overwrite`). Returns (set name, facts)
    of every set written, sorted by name."""
    check_request(request)
    refuse_nonempty(out, overwrite, command="data")
    members = request_members(request)
    with atomic_directory(out, overwrite=True, command="data") as tmp:
        write_family(tmp, members, request.seed)
    return sorted((name, len(member.facts)) for member in members for name in member_names(member))
