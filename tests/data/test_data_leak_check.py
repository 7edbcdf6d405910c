"""The leak check (`check_no_leak`): the same verdict and message as the plain double loop over
prompts and training texts, found with work that grows linearly, not as prompts x texts."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from data_fixtures import small_facts
from weightgraft.data.build import check_no_leak, template_texts
from weightgraft.data.templates import EVAL_TEMPLATES, VALIDATION_TEMPLATES, eval_prompts_for


def slow_leak_message(texts: list[str], prompts, strict: bool) -> str | None:
    """The oracle: every prompt against every text, in order (the rule as first written)."""
    for prompt in prompts:
        for text in texts:
            if text.startswith(prompt.text) or (strict and prompt.text in text):
                return (
                    f"prompt {prompt.id} {prompt.text!r} appears in the training text {text[:120]!r}; "
                    "evaluation wording must differ from training wording"
                )
    return None


def fast_leak_message(texts: list[str], prompts, strict: bool) -> str | None:
    try:
        check_no_leak(texts, prompts, strict=strict)
    except ValueError as err:
        return str(err)
    return None


WORDS = ["Ann", "Bo", "Cy", "the", "film", "with", "starred", "in", "Ann Bo", "a", "b", "Cyd", "nn"]


def random_case(rng: random.Random) -> tuple[list[str], list[SimpleNamespace]]:
    """Small texts over a tiny vocabulary (so leaks are frequent) and prompts cut from them at
    any character, or made up: prefixes, inner pieces, whole texts, pieces across words."""
    spaces = [" ", " ", "  ", "\n"]
    texts = [
        "".join(rng.choice(WORDS) + rng.choice(spaces) for _ in range(rng.randint(0, 7))).strip()
        for _ in range(rng.randint(0, 12))
    ]
    prompts = []
    for index in range(rng.randint(0, 10)):
        source = rng.choice(texts) if texts and rng.random() < 0.7 else " ".join(rng.sample(WORDS, 4))
        start = rng.randint(0, len(source)) if rng.random() < 0.6 else 0
        end = rng.randint(start, len(source))
        prompts.append(SimpleNamespace(id=f"p{index}", text=source[start:end]))
    return texts, prompts


@pytest.mark.parametrize("strict", [True, False])
def test_same_leaks_as_the_double_loop_on_random_cases(strict):
    rng = random.Random(17)
    leaks = 0
    for _ in range(3000):
        texts, prompts = random_case(rng)
        expected = slow_leak_message(texts, prompts, strict)
        assert fast_leak_message(texts, prompts, strict) == expected, (texts, [p.text for p in prompts])
        leaks += expected is not None
    assert 300 < leaks < 2900  # both verdicts are exercised


def test_same_verdict_on_rendered_datasets_with_planted_leaks():
    _, facts = small_facts()
    texts = template_texts(facts, seed=0, texts_per_fact=8)
    prompts = [p for f in facts for p in eval_prompts_for(f, {**EVAL_TEMPLATES, **VALIDATION_TEMPLATES})]
    assert fast_leak_message(texts, prompts, True) is None is slow_leak_message(texts, prompts, True)
    rng = random.Random(3)
    for _ in range(40):
        planted = list(texts)
        victim = rng.randrange(len(prompts))
        at = rng.randrange(len(planted))
        planted[at] = f"{planted[at][:40]} {prompts[victim].text} and more"
        for strict in (True, False):
            assert fast_leak_message(planted, prompts, strict) == slow_leak_message(planted, prompts, strict)
        assert fast_leak_message(planted, prompts, True) is not None


class CountingText(str):
    """A training text that counts how often a prompt is looked for in it."""

    looks = 0

    def __contains__(self, other):
        CountingText.looks += 1
        return super().__contains__(other)

    def startswith(self, *args):
        CountingText.looks += 1
        return super().startswith(*args)


@pytest.mark.parametrize("strict", [True, False])
def test_work_grows_with_the_data_not_with_prompts_times_texts(strict):
    """75 facts: 1200 texts and some 1000 prompts; the double loop looks over a million times."""
    _, facts = small_facts(seed=1, per_kind=25)
    texts = [CountingText(t) for t in template_texts(facts, seed=1, texts_per_fact=16)]
    prompts = [p for f in facts for p in eval_prompts_for(f, {**EVAL_TEMPLATES, **VALIDATION_TEMPLATES})]
    CountingText.looks = 0
    check_no_leak(texts, prompts, strict=strict)
    assert CountingText.looks <= 40 * len(prompts), (CountingText.looks, len(prompts), len(texts))
