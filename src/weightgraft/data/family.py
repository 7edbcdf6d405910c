"""`weightgraft data`'s work: the seeded family of relation datasets (relation, its two
one-direction sets, task, free text, known films), or the sets of a user's own facts and articles,
checked before any work and written in one atomic step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from weightgraft.atomic import atomic_directory, refuse_nonempty
from weightgraft.data.build import build_dataset, build_with_one_direction_sets, split_disjoint
from weightgraft.data.errors import DataError
from weightgraft.data.facts import GENERATED_KINDS, generate_facts, known_film_facts
from weightgraft.data.io import read_user_articles, read_user_facts
from weightgraft.data.names import NamePool

KINDS_HELP = "comma-separated kinds: fake_fake, fake_real, real_shuffled (real_real: the known films)"


@dataclass(frozen=True)
class DataRequest:
    """The datasets asked for (the options of `weightgraft data`, named alike): generated facts
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


def write_datasets(request: DataRequest, out: Path, overwrite: bool = False) -> list[tuple[str, int]]:
    """Check `request`, then write its dataset folders into `out` at once (a non-empty `out` only
    with `overwrite`); returns (set name, facts) of every set written, sorted by name."""
    check_request(request)
    refuse_nonempty(out, overwrite)
    if request.user_facts is not None:
        return sorted(_write_user_sets(request, out))
    return sorted(_write_generated_sets(request, out))


def _write_user_sets(request: DataRequest, out: Path) -> list[tuple[str, int]]:
    """The `user` set (and `user_a2b`, `user_b2a`), or with articles one `user` set trained on them."""
    facts = read_user_facts(request.user_facts)
    user_articles = read_user_articles(request.articles) if request.articles is not None else None
    with atomic_directory(out, overwrite=True) as tmp:
        if user_articles is not None:
            extra = {"articles": str(request.articles)}
            build_dataset(tmp / "user", facts, request.seed, "articles", articles=user_articles, extra_options=extra)
            return [("user", len(facts))]
        build_with_one_direction_sets(tmp / "user", facts, request.seed, request.texts_per_fact)
        return [(name, len(facts)) for name in ("user", "user_a2b", "user_b2a")]


def _split_generated(request: DataRequest) -> dict[str, list]:
    """The generated facts, split into the sets asked for (plus the known films when asked)."""
    chosen = [k.strip() for k in request.kinds.split(",") if k.strip()]
    bad = [k for k in chosen if k not in GENERATED_KINDS]
    if bad or not chosen:
        raise DataError(f"--kinds: unknown or no kind(s) {bad}; {KINDS_HELP}")
    pool = NamePool(request.seed)
    known_facts = known_film_facts(request.seed, pool)
    if request.known > len(known_facts):
        raise DataError(f"--known: only {len(known_facts)} real films in our list; ask for at most that")
    facts = generate_facts({k: request.facts_per_kind for k in chosen}, request.seed, pool, known_facts)
    sizes = {"relation": request.relation}
    if request.task:
        sizes["task"] = request.task
    if request.freetext:
        sizes["freetext"] = request.freetext
    if sum(sizes.values()) > len(facts):
        raise DataError(
            f"the sets ask for {sum(sizes.values())} facts, but --facts-per-kind "
            f"{request.facts_per_kind} x {len(chosen)} kind(s) gives {len(facts)}; raise --facts-per-kind"
        )
    parts = split_disjoint(facts, sizes)
    if request.known:
        parts["known"] = known_facts[: request.known]
    return parts


def _write_generated_sets(request: DataRequest, out: Path) -> list[tuple[str, int]]:
    """The generated sets, each from its own seed (the request's plus its place in the split)."""
    parts = _split_generated(request)
    written: list[tuple[str, int]] = []
    with atomic_directory(out, overwrite=True) as tmp:
        for offset, (name, part) in enumerate(parts.items()):
            seed = request.seed + offset
            if name == "freetext":
                build_dataset(tmp / name, part, seed, "freetext", request.articles_per_fact)
            elif name == "relation":
                build_with_one_direction_sets(tmp / name, part, seed, request.texts_per_fact)
                written += [("relation_a2b", len(part)), ("relation_b2a", len(part))]
            else:
                build_dataset(tmp / name, part, seed, "templates", request.texts_per_fact)
            written.append((name, len(part)))
    return written
