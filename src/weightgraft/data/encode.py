"""Token positions of a prompt's roles, from the tokenizer's offset mapping.

A token belongs to a role when the non-space characters it covers lie inside the role's
character span (a whitespace-only token, when all of it lies inside). Tokens that straddle a
span boundary, or spans whose characters no token covers exactly, are errors: we never search
token subsequences and never drop a prompt. Offsets are characters, not bytes, so any Unicode
text maps; a character that a byte-level tokenizer splits into several tokens gives them all.
"""

from __future__ import annotations

from dataclasses import dataclass

from weightgraft.data.errors import DataError
from weightgraft.data.schema import EvalPrompt, Role


class SpanMappingError(DataError):
    """A role span does not line up with token boundaries."""


def check_context(lengths: dict[str, int], limit: int | None, where: str) -> None:
    """Every prompt (its tokens and its target's) must fit the model's context of `limit`
    tokens; checked before any forward pass (past it, GPT-2 fails inside torch and rotary models
    compute at positions they never saw). `lengths`: prompt id -> tokens."""
    if limit is None:
        return
    over = {pid: n for pid, n in lengths.items() if n > limit}
    if over:
        pid, n = max(over.items(), key=lambda item: item[1])
        raise DataError(
            f"{where}: {len(over)} prompt(s) are longer than the model's context of {limit} tokens "
            f"(the longest, {pid!r}, has {n}); shorten them (e.g. the names in the facts) or use a "
            "model with a longer context"
        )


@dataclass
class EncodedPrompt:
    input_ids: list[int]
    positions: dict[Role, list[int]]
    target_ids: list[int]


def _encode(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]], list[int]]:
    """Ids, offsets and special-token mask, without special tokens appended at the end."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            "encode_prompt needs a fast tokenizer (offset mappings); load it with "
            "AutoTokenizer.from_pretrained(..., use_fast=True)"
        )
    enc = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids, offsets, special = list(enc["input_ids"]), list(enc["offset_mapping"]), list(enc["special_tokens_mask"])
    while special and special[-1] == 1:  # e.g. an EOS some tokenizers append
        ids.pop(), offsets.pop(), special.pop()
    return ids, [tuple(o) for o in offsets], special


def _visible_range(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The token's character range without surrounding whitespace; None for pure whitespace."""
    piece = text[start:end]
    stripped = piece.strip()
    if not stripped:
        return None
    lead = len(piece) - len(piece.lstrip())
    return start + lead, start + lead + len(stripped)


def encode_prompt(tokenizer, prompt: EvalPrompt) -> EncodedPrompt:
    ids, offsets, special = _encode(tokenizer, prompt.text)
    text = prompt.text
    visible = [None if s else _visible_range(text, a, b) for (a, b), s in zip(offsets, special)]
    positions: dict[Role, list[int]] = {}
    for role, span in prompt.spans.items():
        inside = []
        for index, rng in enumerate(visible):
            if rng is None:  # a whitespace-only token counts when it lies inside the span
                a, b = offsets[index]
                if not special[index] and b > a and a >= span.start and b <= span.end:
                    inside.append(index)
                continue
            if rng[1] <= span.start or rng[0] >= span.end:
                continue
            if rng[0] < span.start or rng[1] > span.end:
                raise SpanMappingError(
                    f"token {index} ({text[rng[0] : rng[1]]!r}) crosses the edge of the {role} span "
                    f"{text[span.start : span.end]!r} in prompt {prompt.id}: {text!r}"
                )
            inside.append(index)
        # Compare as sets of character indices: with byte-level tokenizers (and byte fallback)
        # one character can give several tokens that share its offsets.
        covered = {c for i in inside if visible[i] for c in range(*visible[i]) if not text[c].isspace()}
        wanted = {c for c in range(span.start, span.end) if not text[c].isspace()}
        if not any(visible[i] for i in inside) or covered != wanted:
            raise SpanMappingError(
                f"the {role} span {text[span.start : span.end]!r} does not map onto whole tokens "
                f"in prompt {prompt.id}: {text!r}"
            )
        positions[role] = inside
    if "last_token" in positions:
        last = len(ids) - 1
        if last not in positions["last_token"]:
            raise SpanMappingError(f"the last token is outside the last_token span in prompt {prompt.id}: {text!r}")
        positions["last_token"] = [last]

    full_ids, _, _ = _encode(tokenizer, text + prompt.target)
    if full_ids[: len(ids)] != ids or len(full_ids) == len(ids):
        raise SpanMappingError(
            f"the prompt's tokens are not a prefix of prompt+target's tokens in prompt {prompt.id}: "
            f"{text!r} + {prompt.target!r}; the target would not follow the prompt as tokenized"
        )
    return EncodedPrompt(input_ids=ids, positions=positions, target_ids=full_ids[len(ids) :])


def encode_scored_prompt(tokenizer, prompt: EvalPrompt) -> EncodedPrompt:
    """`encode_prompt` for a prompt whose target will be scored: a target with no tokens is refused
    (DataError), since no metric can be computed on it."""
    enc = encode_prompt(tokenizer, prompt)
    if not enc.target_ids:
        raise DataError(
            f"prompt {prompt.id!r}: target {prompt.target!r} has no tokens; rebuild the dataset "
            "(every prompt needs a non-empty target)"
        )
    return enc
