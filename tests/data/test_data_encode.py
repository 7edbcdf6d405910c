"""Token positions from offset mappings, on byte-level BPE and SentencePiece-style tokenizers."""

from __future__ import annotations

import pytest

from data_fixtures import small_facts
from tokenizer_fixtures import byte_level_bpe, metaspace_bpe
from weightgraft.data.build import template_texts
from weightgraft.data.encode import SpanMappingError, encode_prompt
from weightgraft.data.schema import CharSpan, EvalPrompt
from weightgraft.data.templates import EVAL_TEMPLATES, VALIDATION_TEMPLATES, eval_prompts_for

_cache: dict = {}


def _tokenizers():
    if not _cache:
        known, facts = small_facts()
        corpus = template_texts(known + facts, 0, 6)
        _cache["byte_level"] = byte_level_bpe(corpus, 700)
        _cache["metaspace"] = metaspace_bpe(corpus, 700)
    return _cache


def _all_prompts():
    _, facts = small_facts()
    return [p for f in facts for t in (EVAL_TEMPLATES, VALIDATION_TEMPLATES) for p in eval_prompts_for(f, t)]


def _squeeze(text: str) -> str:
    return "".join(text.replace("\u2581", " ").split())


@pytest.mark.parametrize("style", ["byte_level", "metaspace"])
def test_every_span_maps_to_exactly_the_entity_tokens(style):
    tokenizer = _tokenizers()[style]
    tokens_checked = 0
    for prompt in _all_prompts():
        enc = encode_prompt(tokenizer, prompt)
        assert enc.input_ids == tokenizer(prompt.text)["input_ids"]
        assert enc.input_ids[0] == tokenizer.bos_token_id
        for role, span in prompt.spans.items():
            positions = enc.positions[role]
            if role == "last_token":
                assert positions == [len(enc.input_ids) - 1]
                last = tokenizer.convert_ids_to_tokens(enc.input_ids[-1:])[0]
                assert _squeeze(tokenizer.convert_tokens_to_string([last])) in prompt.text[span.start : span.end]
                continue
            # Independent check: the positions are consecutive, and decoding exactly those tokens
            # gives the span's text (spaces aside); one token more on either side does not.
            assert positions == list(range(positions[0], positions[-1] + 1))
            pieces = tokenizer.convert_ids_to_tokens(enc.input_ids[positions[0] : positions[-1] + 1])
            decoded = tokenizer.convert_tokens_to_string(pieces)
            assert _squeeze(decoded) == _squeeze(prompt.text[span.start : span.end]), (role, prompt.text)
            tokens_checked += len(positions)
        assert tokenizer.decode(enc.target_ids).strip() == prompt.target.strip()
        assert tokenizer(prompt.text + prompt.target)["input_ids"] == enc.input_ids + enc.target_ids
    assert tokens_checked > 0


def test_byte_level_tokens_carry_the_leading_space():
    tokenizer = _tokenizers()["byte_level"]
    prompt = _all_prompts()[0]
    enc = encode_prompt(tokenizer, prompt)
    first_target = tokenizer.convert_ids_to_tokens(enc.target_ids[:1])[0]
    assert first_target.startswith("\u0120")  # GPT-2's marker for a leading space


def test_metaspace_tokens_carry_the_word_marker():
    tokenizer = _tokenizers()["metaspace"]
    enc = encode_prompt(tokenizer, _all_prompts()[0])
    assert tokenizer.convert_ids_to_tokens(enc.target_ids[:1])[0].startswith("\u2581")


@pytest.mark.parametrize("style", ["byte_level", "metaspace"])
def test_span_inside_a_word_is_an_error_showing_the_prompt(style):
    tokenizer = _tokenizers()[style]
    good = _all_prompts()[0]
    span = good.spans["first_entity"]
    offsets = tokenizer(good.text, return_offsets_mapping=True)["offset_mapping"]
    # A token of the entity with two or more letters: start the span one letter into it.
    start = next(
        a + 1 + (good.text[a] == " ")
        for a, b in offsets
        if span.start <= a < span.end and len(good.text[a:b].strip()) >= 2
    )
    bad = good.model_copy(update={"spans": {**good.spans, "first_entity": CharSpan(start=start, end=span.end)}})
    with pytest.raises(SpanMappingError, match="first_entity") as err:
        encode_prompt(tokenizer, bad)
    assert good.text in str(err.value)


def test_target_that_would_merge_with_the_prompt_is_an_error():
    tokenizer = _tokenizers()["byte_level"]
    assert len(tokenizer(" film", add_special_tokens=False)["input_ids"]) == 1  # a frequent word
    prompt = EvalPrompt(id="glued", fact_id="x", template_id="t", text="The fi", target="lm", spans={})
    with pytest.raises(SpanMappingError, match="prefix") as err:
        encode_prompt(tokenizer, prompt)
    assert "The fi" in str(err.value)


def test_empty_span_is_an_error():
    tokenizer = _tokenizers()["byte_level"]
    prompt = EvalPrompt(
        id="x",
        fact_id="x",
        template_id="t",
        text="Ada North stars with",
        target=" Ben",
        spans={"first_entity": CharSpan(start=3, end=3)},
    )
    with pytest.raises(SpanMappingError, match="Ada North stars with"):
        encode_prompt(tokenizer, prompt)
