"""The scored unit of a name in any script (issue 41, item 3).

A byte-level tokenizer splits a name's first character over byte tokens when it has no token for
it: 李 is `'\\xe6'`, `'\\x9d'`, `'\\x8e'` in the built-in tokenizer, and every CJK character from
U+6000 to U+6FFF starts with `'\\xe6'`. Scoring that first byte measured the script, not the name.
The scored unit is the target's tokens from the scored one to the one that completes the first
character: for every name here, in twelve scripts, on the built-in tokenizer and SmolLM2's, a
unit of several tokens decodes to exactly the name's first character (a unit of one token is the
scored token as before: " R", " Rosa", " É"), and no shorter run of tokens completes it. Run with `-s`
to see each name's unit.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tokenizer_fixtures import builtin_tokenizer, smollm2_tokenizer
from weightgraft.data.encode import describe_scored, encode_scored_prompt, token_text
from weightgraft.data.schema import CharSpan, EvalPrompt
from weightgraft.reporting.report import scored_token_lines

NAMES = {
    "chinese": "李小龍",
    "chinese (same first byte)": "林志玲",
    "japanese kana": "さくら",
    "japanese kanji": "山田太郎",
    "korean": "김민수",
    "cyrillic": "Иван Петров",
    "cyrillic (same first byte)": "Олег Попов",
    "greek": "Αλέξης Τσίπρας",
    "arabic": "محمد علي",
    "hebrew": "דוד לוי",
    "devanagari": "राहुल शर्मा",
    "thai": "สมชาย ใจดี",
    "latin É": "Émile Zola",
    "latin Ü": "Ümit Yıldız",
    "emoji": "🎬 Star",
    "ascii": "Rosa Park",
}
TEXT = "Ada Brook stars in a movie alongside"
TOKENIZERS = {"builtin": builtin_tokenizer, "smollm2": smollm2_tokenizer}


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


def _encoded(tokenizer) -> dict:
    return {script: encode_scored_prompt(tokenizer, _prompt(name)) for script, name in NAMES.items()}


@pytest.mark.parametrize("which", list(TOKENIZERS))
def test_the_scored_unit_decodes_to_exactly_the_first_character(which):
    tokenizer = TOKENIZERS[which]()
    encoded = _encoded(tokenizer)
    print(f"\n{which}: the scored unit per script")
    for script, enc in encoded.items():
        spelled = [token_text(tokenizer, t) for t in enc.unit_ids]
        print(f"  {script:26} {NAMES[script]!r:20} tokens {enc.scored + 1}-{enc.scored + enc.unit}: {spelled}")
    for script, enc in encoded.items():
        first, text = NAMES[script][0], tokenizer.decode(enc.unit_ids).lstrip()
        # a unit of one token is the scored token as it was (" R", " Rosa"); a split character's
        # tokens spell that character and nothing more
        assert text == first if enc.unit > 1 else text.startswith(first), (which, script, text)
        # the fewest tokens that do: without the last, the first character is incomplete
        shorter = tokenizer.decode(enc.unit_ids[:-1]).lstrip()
        assert shorter == "" or shorter.startswith("\ufffd"), (which, script, shorter)
        assert enc.unit_ids == enc.target_ids[enc.scored : enc.scored + enc.unit]
    assert encoded["ascii"].unit == 1
    split = {script for script, enc in encoded.items() if enc.unit > 1}
    # at least five scripts (not counting the second names of a script) split on both tokenizers
    assert len(split - {"chinese (same first byte)", "cyrillic (same first byte)"}) >= 5, (which, sorted(split))


@pytest.mark.parametrize("which", list(TOKENIZERS))
def test_names_that_share_a_first_byte_token_have_different_units(which):
    """The issue's case: the old scored token was one byte shared by the script; the units differ."""
    tokenizer = TOKENIZERS[which]()
    encoded = _encoded(tokenizer)
    for a, b in (("chinese", "chinese (same first byte)"), ("cyrillic", "cyrillic (same first byte)")):
        assert encoded[a].scored_id == encoded[b].scored_id, (which, a, b)
        assert encoded[a].unit > 1 and encoded[a].unit_ids != encoded[b].unit_ids, (which, a, b)


def test_the_builtin_tokenizer_splits_accented_latin_names_that_smollm2_keeps_whole():
    """É and Ü: the built-in tokenizer's first content tokens are both `'\\xc3'` (a unit of two);
    SmolLM2 has a token `' É'` (a unit of one) but splits Ü (`' \\xc3'`, `'\\x9c'`)."""
    builtin, smollm2 = builtin_tokenizer(), smollm2_tokenizer()
    ours = _encoded(builtin)
    assert ours["latin É"].scored_id == ours["latin Ü"].scored_id
    assert (ours["latin É"].unit, ours["latin Ü"].unit) == (2, 2)
    theirs = _encoded(smollm2)
    assert (theirs["latin É"].unit, theirs["latin Ü"].unit) == (1, 2)


@pytest.mark.parametrize("which", list(TOKENIZERS))
def test_the_note_names_the_unit_and_its_tokens(which):
    tokenizer = TOKENIZERS[which]()
    encoded = _encoded(tokenizer)
    for script, enc in encoded.items():
        note = describe_scored(tokenizer, enc)
        if enc.unit == 1 and enc.scored == 0:
            assert note == ""
        elif enc.unit > 1:
            start, end = enc.scored + 1, enc.scored + enc.unit
            assert note.startswith(f"scored unit: target tokens {start}-{end} of {len(enc.target_ids)} ("), script
            assert f"the first character {NAMES[script][0]!r}" in note, (script, note)
            assert ("whitespace-only" in note) == (enc.scored > 0)


def test_the_report_names_the_unit_where_no_target_starts_with_a_space_token():
    """SmolLM2's case: its names' first tokens carry their space (" \\xe6"), so no record has
    `scored_after_whitespace`, and the report still says what is scored."""
    record = SimpleNamespace(
        scored_after_whitespace={}, scored_units={"p1": 3, "p2": 2}, examples=("p0", "p1", "p2", "p3")
    )
    (line, blank) = scored_token_lines(record)
    assert line.startswith(
        "Scored unit: 2 of 4 prompts have a target whose first character the tokenizer splits over 2 to 3 byte tokens"
    )
    assert "rank is the largest of their ranks" in line and "`prob` the product" in line and "`p1`: 3 tokens" in line
    assert blank == ""
    assert scored_token_lines(SimpleNamespace(scored_after_whitespace={}, scored_units={}, examples=("p0",))) == []
