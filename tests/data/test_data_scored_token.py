"""The scored token of a target carries content (issue 31, item 4).

A target is written with its leading space; a byte-level BPE that has no merge of the space with a
name's first byte (the built-in tokenizer, for every name whose first character is not ASCII)
splits the space off as a token of its own, and scoring that token scored "predicts a space". The
scored token is the target's first that is not whitespace alone; for names in several scripts, with
the built-in tokenizer, a SentencePiece tokenizer with byte fallback and SmolLM2's (a real model's,
when its GGUF file and the `gguf` package are here), it is the name's first bytes. Run with `-s` to
see each script's scored token.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from tokenizer_fixtures import builtin_tokenizer, sentencepiece_unigram, smollm2_tokenizer
from weightgraft.data.data_errors import DataError
from weightgraft.data.encode import (
    describe_scored,
    encode_prompt,
    encode_scored_prompt,
    is_whitespace_token,
    token_bytes,
    token_text,
)
from weightgraft.data.schema import CharSpan, EvalPrompt

# One name per script; "Zoë" starts with an ASCII letter, "Rosa" is an ordinary name.
NAMES = {
    "latin accents": "Émile Zola",
    "latin accents (Ü)": "Ünal Demir",
    "latin, ASCII first letter": "Zoë Kravitz",
    "CJK": "李小龍",
    "emoji": "🎬 Star",
    "greek": "Αλέξης Τσίπρας",
    "cyrillic": "Иван Петров",
    "ascii": "Rosa Park",
}
TEXT = "Ada Brook stars in a movie alongside"


def _prompt(name: str) -> EvalPrompt:
    last = TEXT.rsplit(" ", 1)[-1]
    return EvalPrompt(
        id=name,
        fact_id="f",
        template_id="t",
        text=TEXT,
        target=" " + name,
        spans={
            "first_entity": CharSpan(start=0, end=len("Ada Brook")),
            "last_token": CharSpan(start=len(TEXT) - len(last), end=len(TEXT)),
        },
    )


def _builtin():
    return builtin_tokenizer()


def _smollm2():
    return smollm2_tokenizer()


@lru_cache(maxsize=1)
def _sentencepiece():
    corpus = [f"{TEXT} Rosa Park. Ada Brook won a prize." for _ in range(20)]
    return sentencepiece_unigram(corpus, 300)


TOKENIZERS = {"builtin": _builtin, "smollm2": _smollm2, "sentencepiece": _sentencepiece}


def _scored_table(tokenizer) -> dict[str, tuple]:
    """Per script: (scored index, token count, the scored token as text, its bytes, the note)."""
    table = {}
    for script, name in NAMES.items():
        enc = encode_scored_prompt(tokenizer, _prompt(name))
        table[script] = (
            enc.scored,
            len(enc.target_ids),
            tokenizer.decode([enc.scored_id]),
            token_bytes(tokenizer, enc.scored_id),
            describe_scored(tokenizer, enc),
        )
    return table


@pytest.mark.parametrize("which", list(TOKENIZERS))
def test_the_scored_token_is_the_names_first_bytes_in_every_script(which):
    tokenizer = TOKENIZERS[which]()
    table = _scored_table(tokenizer)
    print(f"\n{which}: the decoded scored token per script")
    for script, (scored, count, text, raw, note) in table.items():
        print(f"  {script:26} {NAMES[script]!r:18} token {scored + 1}/{count}: {text!r} bytes {raw!r}  {note}")
    for script, (_, _, text, raw, _) in table.items():
        name = NAMES[script].encode()
        assert text.strip(), f"{which}, {script}: the scored token {text!r} is whitespace alone"
        assert raw is not None and raw.lstrip(b" "), f"{which}, {script}: no bytes for {text!r}"
        content = raw.lstrip(b" ")
        # the name's first bytes: the whole first character or a part of it, never a space
        assert name.startswith(content) and content[:1] == name[:1], (which, script, raw, name)


def test_the_builtin_tokenizer_splits_the_space_off_and_the_name_is_scored_after_it():
    """The built-in tokenizer's case of the issue: seven names of eight begin with `' '` alone."""
    tokenizer = _builtin()
    for script, name in NAMES.items():
        enc = encode_prompt(tokenizer, _prompt(name))
        split = is_whitespace_token(tokenizer, enc.target_ids[0])
        assert split == (name[0] not in "ZR"), script
        assert enc.scored == (1 if split else 0)
        # the scoring sequence is the prompt, then the whitespace token: the model predicts the
        # content token with the space in front of it, as it would write the target
        assert enc.scoring_ids == enc.input_ids + enc.target_ids[: enc.scored]
        assert enc.scored_id == enc.target_ids[enc.scored]
        assert (describe_scored(tokenizer, enc) != "") == split


def test_ascii_names_keep_their_first_token():
    """Ordinary names with the built-in tokenizer: the first target token (" R", " Z") carries
    content and stays scored, with the same ids as before. (The small SentencePiece tokenizer of
    these tests splits its word marker off every name, ASCII or not: there the name's letter is
    scored after it, as the table above shows.)"""
    tokenizer = _builtin()
    for name in ("Rosa Park", "Zoë Kravitz"):
        enc = encode_scored_prompt(tokenizer, _prompt(name))
        assert enc.scored == 0 and describe_scored(tokenizer, enc) == ""
        assert enc.scoring_ids == enc.input_ids
        assert enc.scored_id == enc.target_ids[0] and tokenizer.decode([enc.scored_id]) in (" R", " Z")


def test_a_target_of_whitespace_alone_is_refused():
    with pytest.raises(DataError, match="no token that is not whitespace alone"):
        encode_scored_prompt(_builtin(), _prompt("").model_copy(update={"target": "  "}))


def test_report_text_of_a_partial_character_is_its_bytes():
    tokenizer = _builtin()
    enc = encode_scored_prompt(tokenizer, _prompt("李小龍"))
    assert token_text(tokenizer, enc.scored_id) == repr("李".encode()[:1])
    assert token_text(tokenizer, enc.target_ids[0]) == repr(" ")
