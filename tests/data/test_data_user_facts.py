"""A user's facts file: every kind of bad data is refused or warned about, with its line number
(blank lines counted); duplicates are refused, not merged (issue 9, item 9)."""

from __future__ import annotations

import json

import pytest

from data_fixtures import OTHER_USER_FACT, USER_FACT
from weightgraft.data.data_errors import DataError
from weightgraft.data.io import read_user_facts

GOOD, OTHER = USER_FACT, OTHER_USER_FACT


def _write(tmp_path, *lines) -> object:
    path = tmp_path / "facts.jsonl"
    path.write_text(
        "".join((json.dumps(line) if isinstance(line, dict) else line) + "\n" for line in lines), encoding="utf-8"
    )
    return path


@pytest.mark.parametrize(
    "bad, message",
    [
        ({**OTHER, "first_actor": ""}, "line 4: first_actor is empty"),
        ({**OTHER, "second_actor": "   "}, "line 4: second_actor is empty"),
        ({**OTHER, "movie_title": " Red Road"}, "line 4: movie_title ' Red Road' has leading, trailing"),
        ({**OTHER, "movie_title": "Red\tRoad "}, "line 4: movie_title 'Red\\\\tRoad ' has leading, trailing"),
        ({**OTHER, "second_actor": "Eve Stone"}, "line 4: 'Eve Stone' is both first_actor and second_actor"),
        ({**GOOD, "first_actor": "Ben South", "second_actor": "Ada North"}, "line 4: the same fact as line 1"),
        ({**OTHER, "release_year": "soon"}, "line 4: field release_year"),
    ],
)
def test_bad_fact_is_refused_with_its_line(tmp_path, bad, message):
    path = _write(tmp_path, GOOD, "", "   ", bad)  # two blank lines: the bad fact is on line 4
    with pytest.raises(DataError, match=message) as err:
        read_user_facts(path)
    assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)


def test_actor_in_several_facts_and_long_names_are_warned(tmp_path, capsys):
    long_title = "The " + "Very " * 30 + "Long Film"
    path = _write(tmp_path, GOOD, "", {**OTHER, "second_actor": "Ada North", "movie_title": long_title})
    facts = read_user_facts(path)
    assert [f.id for f in facts] == ["user-0000", "user-0001"]
    err = capsys.readouterr().err.splitlines()
    assert f"warning: {path} line 3: movie_title is {len(long_title)} characters long" in err[0]
    assert err[1].startswith(f"warning: {path} lines 1, 3: Ada North is in 2 facts")


def test_encoding_errors_are_clear(tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_bytes(
        json.dumps(GOOD).encode() + b"\n\n" + json.dumps(OTHER).encode().replace(b"Eve", b"\xe9ve") + b"\n"
    )
    with pytest.raises(DataError, match=r"line 3 is not UTF-8 text \(byte 0xe9\); save the file as UTF-8"):
        read_user_facts(path)
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\n")
    with pytest.raises(DataError, match="byte-order mark"):
        read_user_facts(path)
    path.write_text(json.dumps(GOOD) + "\n\n{not json\n")
    with pytest.raises(DataError, match="line 3 is not valid JSON"):
        read_user_facts(path)


def test_unicode_names_are_accepted(tmp_path):
    path = _write(tmp_path, {**GOOD, "first_actor": "Penélope Cruz", "second_actor": "李小龍"})
    assert read_user_facts(path)[0].second_actor == "李小龍"


def test_prompt_longer_than_the_models_context_is_refused_before_training(tmp_path, capsys):
    from types import SimpleNamespace

    from tokenizer_fixtures import byte_level_bpe
    from weightgraft.data.schema import CharSpan, EvalPrompt
    from weightgraft.training.lengths import check_lengths

    tokenizer = byte_level_bpe(["Ada North stars with Ben South."] * 20, 300)
    config = SimpleNamespace(max_position_embeddings=64)
    name = "Ada " + "North " * 80 + "Jr"
    prompt = EvalPrompt(
        id="p1",
        fact_id="f",
        template_id="t",
        text=f"{name} stars with",
        target=" Ben",
        spans={"first_entity": CharSpan(start=0, end=len(name))},
    )
    short = prompt.model_copy(update={"id": "p0", "text": "Ada North stars with"})
    with pytest.raises(
        DataError,
        match=r"1 validation prompt\(s\) are longer than the model's context of 64 "
        r"tokens \(prompt p1: \d+ tokens\); shorten the names",
    ):
        check_lengths(tokenizer, config, ["short text"], [short, prompt], 256, tmp_path)
    check_lengths(tokenizer, config, ["short text", f"{name} is an actor."], [short], 32, tmp_path)
    assert "1 of 2 training texts are longer than max_length 32 tokens" in capsys.readouterr().err


def test_a_title_that_holds_the_answer_is_warned(tmp_path, capsys):
    """A prompt that names the film would hand the model the actor it asks for: allowed, but said."""
    path = _write(tmp_path, GOOD, {**OTHER, "movie_title": "The finn lake Story"})
    assert len(read_user_facts(path)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"warning: {path} line 2: movie_title 'The finn lake Story' contains 'Finn Lake', the answer of the prompts "
        "that ask for that actor, so a model can answer them by copying from the prompt; check the title"
    ]
