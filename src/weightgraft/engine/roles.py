"""Position sets by entity role: the paper's FE, M, R, LT, `other`, their unions and complements.

A position expression is parsed once (so a typo fails when the config is read or the `Graft` is
made, not mid-run) and evaluated per prompt against the token positions the data layer found for
each role. One implementation for the run configs' conditions (`experiments.conditions`) and the
Python API's `Graft(positions="FE+LT")`, so the two cannot disagree.

Grammar:  expr := term ('+' term)* ;  term := atom ['^C'] | '(' expr ')' ['^C']
Atoms: FE (first entity), M (movie title), R (relation word), LT (last token), other (every
real position in none of FE, M, R, LT; special tokens such as BOS included), ALL, NONE.

R never contains LT: the paper's R is the relation word ("stars") and LT is a separate position,
so a relation span that reaches the prompt's last token loses that token here (and a span made
of the last token alone leaves R not applicable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Paper name -> role name in `weightgraft.data.schema.Role`.
ROLE_OF_ATOM = {"FE": "first_entity", "M": "movie_title", "R": "relation", "LT": "last_token"}
ATOMS = (*ROLE_OF_ATOM, "other", "ALL", "NONE")

_TOKEN = re.compile(r"\s*(\^C|\(|\)|\+|[A-Za-z_]+)")


class NotApplicable(Exception):
    """The expression names a role this prompt's template does not have (e.g. M without a title)."""

    def __init__(self, atom: str):
        super().__init__(f"role {atom} ({ROLE_OF_ATOM[atom]}) is absent from this template")
        self.atom = atom


@dataclass(frozen=True)
class PositionExpr:
    """A parsed position expression; `evaluate` turns it into sorted token indices."""

    text: str
    tree: tuple

    def evaluate(self, role_positions: dict[str, list[int]], num_tokens: int) -> list[int]:
        """Token indices (0..num_tokens-1) selected on a prompt of `num_tokens` real tokens.

        `role_positions` is keyed by role name (`first_entity`, ...). Raises NotApplicable when a
        role the expression names is missing or empty for this prompt.
        """
        return sorted(_eval(self.tree, role_positions, num_tokens))

    def mask(self, role_positions: dict[str, list[int]], num_tokens: int) -> list[bool]:
        chosen = set(self.evaluate(role_positions, num_tokens))
        return [i in chosen for i in range(num_tokens)]


def parse_positions(text: str) -> PositionExpr:
    """Parse e.g. `FE+LT`, `(FE+LT)^C`, `FE^C`, `other`; errors name the offending part."""
    tokens = _tokenize(text)
    tree, rest = _parse_union(tokens, text)
    if rest:
        raise ValueError(f"position expression {text!r}: unexpected {rest[0]!r}")
    return PositionExpr(text=text, tree=tree)


def _tokenize(text: str) -> list[str]:
    tokens, pos = [], 0
    stripped = text.rstrip()
    while pos < len(stripped):
        match = _TOKEN.match(stripped, pos)
        if not match:
            raise ValueError(f"position expression {text!r}: cannot read {stripped[pos:]!r}")
        tokens.append(match.group(1))
        pos = match.end()
    if not tokens:
        raise ValueError("empty position expression; use e.g. FE, LT, FE+LT, (FE+LT)^C, ALL, NONE")
    return tokens


def _parse_union(tokens: list[str], text: str) -> tuple[tuple, list[str]]:
    parts = []
    term, tokens = _parse_term(tokens, text)
    parts.append(term)
    while tokens and tokens[0] == "+":
        term, tokens = _parse_term(tokens[1:], text)
        parts.append(term)
    return (("union", tuple(parts)) if len(parts) > 1 else parts[0]), tokens


def _parse_term(tokens: list[str], text: str) -> tuple[tuple, list[str]]:
    if not tokens:
        raise ValueError(f"position expression {text!r} ends too early")
    head, tokens = tokens[0], tokens[1:]
    if head == "(":
        tree, tokens = _parse_union(tokens, text)
        if not tokens or tokens[0] != ")":
            raise ValueError(f"position expression {text!r}: missing ')'")
        tokens = tokens[1:]
    elif head in ATOMS:
        tree = ("atom", head)
    else:
        raise ValueError(
            f"unknown position {head!r} in {text!r}; known: {', '.join(ATOMS)} "
            "(combine with '+', complement with '^C', group with parentheses)"
        )
    while tokens and tokens[0] == "^C":
        tree, tokens = ("complement", tree), tokens[1:]
    return tree, tokens


def _eval(tree: tuple, roles: dict[str, list[int]], n: int) -> set[int]:
    kind, value = tree
    if kind == "union":
        return set().union(*(_eval(part, roles, n) for part in value))
    if kind == "complement":
        return set(range(n)) - _eval(value, roles, n)
    if value == "ALL":
        return set(range(n))
    if value == "NONE":
        return set()
    if value == "other":
        named = set().union(*(set(roles.get(r, [])) for r in ROLE_OF_ATOM.values()))
        return set(range(n)) - named
    found = roles.get(ROLE_OF_ATOM[value]) or []
    if value == "R":  # the relation word only, never the last token
        found = [i for i in found if i != n - 1]
    if not found:
        raise NotApplicable(value)
    bad = [i for i in found if not 0 <= i < n]
    if bad:
        raise ValueError(f"role {value} has positions {bad} outside a prompt of {n} tokens")
    return set(found)
