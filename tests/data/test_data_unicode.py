"""Spans of names outside ASCII (accents, CJK, emoji, a name as the prompt's last word) map to
the right tokens on byte-level BPE, Metaspace BPE, SentencePiece (byte fallback) and WordPiece."""

from __future__ import annotations

from functools import lru_cache

import pytest

from data_fixtures import small_facts
from tokenizer_fixtures import byte_level_bpe, metaspace_bpe, sentencepiece_unigram, wordpiece
from weightgraft.data.build import template_texts
from weightgraft.data.encode import encode_prompt
from weightgraft.data.schema import EvalPrompt
from weightgraft.data.templates import EVAL_TEMPLATES, render_marked

NAMES = ["Penélope Cruz", "Zoë Kravitz", "José García", "Björk", "李小龍", "Ava ✨ Lee", "Nnamdi Ọkọnkwọ"]
# One name the corpus has seen (its characters merge into longer tokens) and the rest unseen.
SEEN = ["Zoë Kravitz", "李小龍"]
# A template that ends on the name: the name's last word is the prompt's last token.
NAME_LAST = "Q: Who [co-starred] with {entity}"


@lru_cache(maxsize=1)
def _tokenizers():
    known, facts = small_facts()
    corpus = template_texts(known + facts, 0, 6) + [f"{n} is an actor. {n} won a prize." for n in SEEN] * 5
    # Every character once, apart, so that vocabularies without byte fallback have them all.
    alphabet = [" ".join(sorted({c for n in NAMES + ["Él Niño de Kyōto Ryūnosuke"] for c in n if not c.isspace()}))]
    return {
        "byte_level": byte_level_bpe(corpus, 700),
        "metaspace": metaspace_bpe(corpus + alphabet, 700),
        "sentencepiece": sentencepiece_unigram(corpus, 700),
        "wordpiece": wordpiece(corpus + alphabet, 700),
    }


def _prompts() -> list[EvalPrompt]:
    prompts = []
    templates = {**EVAL_TEMPLATES, "name_last": NAME_LAST}
    for i, name in enumerate(NAMES):
        for template_id, template in templates.items():
            rendered = render_marked(template, name, "Él Niño de Kyōto")
            prompts.append(
                EvalPrompt(
                    id=f"{i}:{template_id}",
                    fact_id=str(i),
                    template_id=template_id,
                    text=rendered.text,
                    target=" Ryūnosuke Akutagawa",
                    spans=rendered.spans,
                )
            )
    return prompts


def _squeeze(tokenizer, text: str) -> str:
    """The text as the tokenizer's normalizer sees it (WordPiece: lower case, no accents), spaces
    and word markers removed."""
    normalizer = tokenizer.backend_tokenizer.normalizer
    if normalizer is not None:
        text = normalizer.normalize_str(text)
    return "".join(text.replace("\u2581", " ").replace("##", "").split())


@pytest.mark.parametrize("style", ["byte_level", "metaspace", "sentencepiece", "wordpiece"])
def test_unicode_spans_map_to_the_tokens_of_their_characters(style):
    """Independent check: the positions are consecutive, decoding exactly those tokens gives the
    span's text, and the tokens on either side hold none of the span's characters."""
    tokenizer = _tokenizers()[style]
    several_per_char = 0
    for prompt in _prompts():
        enc = encode_prompt(tokenizer, prompt)
        offsets = [tuple(o) for o in tokenizer(prompt.text, return_offsets_mapping=True)["offset_mapping"]]
        for role, span in prompt.spans.items():
            positions = enc.positions[role]
            if role == "last_token":
                assert positions == [len(enc.input_ids) - 1]
                continue
            assert positions == list(range(positions[0], positions[-1] + 1))
            run = tokenizer.convert_ids_to_tokens(enc.input_ids[positions[0] : positions[-1] + 1])
            decoded = tokenizer.convert_tokens_to_string(run)
            assert _squeeze(tokenizer, decoded) == _squeeze(tokenizer, prompt.text[span.start : span.end]), (
                style,
                role,
                prompt.text,
                run,
            )
            for side in (positions[0] - 1, positions[-1] + 1):
                if 0 <= side < len(offsets):
                    a, b = offsets[side]
                    assert not prompt.text[max(a, span.start) : min(b, span.end)].strip(), (style, role, prompt.text)
        if prompt.template_id == "name_last":
            assert len(enc.input_ids) - 1 in enc.positions["first_entity"]
        several_per_char += len(offsets) - len(set(offsets))
        assert tokenizer(prompt.text + prompt.target)["input_ids"][: len(enc.input_ids)] == enc.input_ids
    if style in ("byte_level", "sentencepiece"):
        assert several_per_char > 0  # the case the issue names: tokens that share one character
