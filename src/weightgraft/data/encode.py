"""Token positions of a prompt's roles, from the tokenizer's offset mapping.

A token belongs to a role when the non-space characters it covers lie inside the role's
character span (a whitespace-only token, when all of it lies inside). Tokens that straddle a
span boundary, or spans whose characters no token covers exactly, are errors: we never search
token subsequences and never drop a prompt. Offsets are characters, not bytes, so any Unicode
text maps; a character that a byte-level tokenizer splits into several tokens gives them all.

The scored token of a target is its first token that carries content: a target is written with
its leading space (" Émile"), and where the tokenizer splits that space off as a token of its
own (a byte-level BPE that has no merge for " " + the name's first byte: `' '`, then `'\xc3'`),
scoring that token would score "predicts a space", which every name shares. `scored` is then
the index in `target_ids` of the first token that is not whitespace alone; the tokens before it
are teacher-forced after the prompt, exactly as the target's later tokens are for
`target_logprob` and `exact_match` (which still cover the whole target), so the model predicts
the content token with the whitespace token in front of it, as it would write the target. For
ordinary names (" R", " Zo") `scored` is 0 and nothing changes.

The scored unit: a byte-level tokenizer can split a name's first character over several tokens
(李 is `'\xe6'`, `'\x9d'`, `'\x8e'`; É is `'\xc3'`, `'\x89'`), and the first of them is shared by
a whole script (every CJK name in U+6000-U+6FFF starts with `'\xe6'`, É and Ü share `'\xc3'`):
scored alone, it would measure the script, not the name. So the scored unit is the `unit` target
tokens from `scored` on: the fewest that complete the first character (they decode, leading
whitespace stripped, to text that does not begin with a replacement character). For a name whose
first token holds a whole character (" R", " Zo", " É" in SmolLM2) `unit` is 1 and nothing
changes. How a unit of several tokens is scored: `engine.scoring.score_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

from weightgraft.data.data_errors import DataError
from weightgraft.data.schema import CharSpan, EvalPrompt, Role


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
    """A prompt's tokens, its roles' positions and its target's tokens; `scored` indexes the
    target token the paper's measures score, the first of the scored unit's `unit` tokens (see
    the module's docstring)."""

    input_ids: list[int]
    positions: dict[Role, list[int]]
    target_ids: list[int]
    scored: int = 0
    unit: int = 1

    @property
    def scored_id(self) -> int:
        """The scored target token (the scored unit's first)."""
        return self.target_ids[self.scored]

    @property
    def unit_ids(self) -> list[int]:
        """The scored unit's tokens: the target tokens that spell its first character."""
        return self.target_ids[self.scored : self.scored + self.unit]

    @property
    def scoring_ids(self) -> list[int]:
        """The sequence whose last logits score `scored_id`: the prompt, then the target's
        whitespace-only tokens before it (teacher-forced)."""
        return self.input_ids + self.target_ids[: self.scored]


def is_whitespace_token(tokenizer, token_id: int) -> bool:
    """Whether a token, decoded alone, is whitespace alone (or nothing): `' '`, `'\\n'`, a
    SentencePiece `'\u2581'`. A token that holds part of a character's bytes decodes to a
    replacement character and carries content."""
    return not tokenizer.decode([token_id]).strip()


def scored_index(tokenizer, target_ids: list[int]) -> int:
    """The index of the first target token that is not whitespace alone (0 when there is none:
    `encode_scored_prompt` refuses such a target)."""
    return next((i for i, t in enumerate(target_ids) if not is_whitespace_token(tokenizer, t)), 0)


def unit_length(tokenizer, target_ids: list[int], scored: int) -> int:
    """How many target tokens from `scored` on the scored unit takes: the fewest whose text,
    leading whitespace stripped, begins with a whole character, not a replacement character (a
    partial UTF-8 sequence); the rest of the target when none does."""
    for end in range(scored + 1, len(target_ids) + 1):
        text = tokenizer.decode(target_ids[scored:end]).lstrip()
        if text and not text.startswith("\ufffd"):
            return end - scored
    return max(len(target_ids) - scored, 1)


def describe_scored(tokenizer, enc: EncodedPrompt) -> str:
    """A note for a record whose scored token is not the target's first, or whose scored unit
    holds several tokens: which tokens are scored and which are teacher-forced before them
    (empty for an ordinary target: its first token alone is scored)."""
    if enc.scored == 0 and enc.unit == 1:
        return ""
    forced = f", after the whitespace-only {_forced(tokenizer, enc)!r}, teacher-forced" if enc.scored else ""
    if enc.unit > 1:
        first = tokenizer.decode(enc.unit_ids).lstrip()[:1]
        spelled = ", ".join(token_text(tokenizer, t) for t in enc.unit_ids)
        tokens = f"{enc.scored + 1}-{enc.scored + enc.unit} of {len(enc.target_ids)}"
        return f"scored unit: target tokens {tokens} ({spelled}), the first character {first!r}{forced}"
    return (
        f"scored target token {enc.scored + 1} of {len(enc.target_ids)}, {token_text(tokenizer, enc.scored_id)}{forced}"
    )


def _forced(tokenizer, enc: EncodedPrompt) -> str:
    """The whitespace-only target tokens before the scored one, as text."""
    # spelled by bytes where the vocabulary has them: a SentencePiece word marker alone decodes to ''
    spelled = [token_bytes(tokenizer, t) for t in enc.target_ids[: enc.scored]]
    if all(b is not None for b in spelled):
        return b"".join(spelled).decode(errors="replace")
    return tokenizer.decode(enc.target_ids[: enc.scored])


def token_text(tokenizer, token_id: int) -> str:
    """A token as text for a report: its decoded text, quoted, or, where it holds only part of
    a character's bytes (it decodes to a replacement character), the bytes it stands for when
    the tokenizer's vocabulary spells them (byte-level BPE, byte fallback)."""
    text = tokenizer.decode([token_id])
    if "\ufffd" not in text:
        return repr(text)
    raw = token_bytes(tokenizer, token_id)
    return repr(raw) if raw is not None else repr(text)


def token_bytes(tokenizer, token_id: int) -> bytes | None:
    """The bytes a token stands for, for byte-level BPE (GPT-2's byte-to-character table) and
    SentencePiece byte fallback (`<0xE6>`, `\u2581` for a space); None when neither spells it."""
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if piece is None:
        return None
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    table = _byte_level_table()
    if all(ch in table for ch in piece):
        return bytes(table[ch] for ch in piece)
    return piece.replace("\u2581", " ").encode()


def _byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet: character -> the byte it stands for."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, n = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + n)] = b
            n += 1
    return chars


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


def encode_roles(
    tokenizer, text: str, spans: dict[Role, CharSpan], prompt_id: str
) -> tuple[list[int], dict[Role, list[int]]]:
    """A prompt's token ids and each role's token positions, from the tokenizer's offsets (the
    module's rule); `last_token` is the last token alone. Raises SpanMappingError."""
    ids, offsets, special = _encode(tokenizer, text)
    visible = [None if s else _visible_range(text, a, b) for (a, b), s in zip(offsets, special)]
    positions: dict[Role, list[int]] = {}
    for role, span in spans.items():
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
                    f"{text[span.start : span.end]!r} in prompt {prompt_id}: {text!r}"
                )
            inside.append(index)
        # Compare as sets of character indices: with byte-level tokenizers (and byte fallback)
        # one character can give several tokens that share its offsets.
        covered = {c for i in inside if visible[i] for c in range(*visible[i]) if not text[c].isspace()}
        wanted = {c for c in range(span.start, span.end) if not text[c].isspace()}
        if not any(visible[i] for i in inside) or covered != wanted:
            raise SpanMappingError(
                f"the {role} span {text[span.start : span.end]!r} does not map onto whole tokens "
                f"in prompt {prompt_id}: {text!r}"
            )
        positions[role] = inside
    if "last_token" in positions:
        last = len(ids) - 1
        if last not in positions["last_token"]:
            raise SpanMappingError(f"the last token is outside the last_token span in prompt {prompt_id}: {text!r}")
        positions["last_token"] = [last]
    return ids, positions


def encode_prompt(tokenizer, prompt: EvalPrompt) -> EncodedPrompt:
    """The prompt's tokens and roles (`encode_roles`) and its target's tokens after them."""
    ids, positions = encode_roles(tokenizer, prompt.text, prompt.spans, prompt.id)
    text = prompt.text
    full_ids, _, _ = _encode(tokenizer, text + prompt.target)
    if full_ids[: len(ids)] != ids or len(full_ids) == len(ids):
        raise SpanMappingError(
            f"the prompt's tokens are not a prefix of prompt+target's tokens in prompt {prompt.id}: "
            f"{text!r} + {prompt.target!r}; the target would not follow the prompt as tokenized"
        )
    target_ids = full_ids[len(ids) :]
    scored = scored_index(tokenizer, target_ids)
    return EncodedPrompt(
        input_ids=ids,
        positions=positions,
        target_ids=target_ids,
        scored=scored,
        unit=unit_length(tokenizer, target_ids, scored),
    )


def encode_scored_prompt(tokenizer, prompt: EvalPrompt) -> EncodedPrompt:
    """`encode_prompt` for a prompt whose target will be scored: a target with no tokens, or with
    no token that carries content (whitespace alone), is refused (DataError), since no metric can
    be computed on it."""
    enc = encode_prompt(tokenizer, prompt)
    if not enc.target_ids:
        raise DataError(
            f"prompt {prompt.id!r}: target {prompt.target!r} has no tokens; rebuild the dataset "
            "(every prompt needs a non-empty target)"
        )
    if is_whitespace_token(tokenizer, enc.scored_id):
        raise DataError(
            f"prompt {prompt.id!r}: target {prompt.target!r} has no token that is not whitespace alone; "
            "rebuild the dataset (every target needs a name or word to score)"
        )
    return enc
