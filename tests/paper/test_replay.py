"""Self-replay texts (`paper.replay`) on the tiny built-in model: the cached decoding against a
plain loop that runs the whole text every step, the same texts for a seed, and the neutral
prompts kept off what the held-out plain facts ask."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from training_fixtures import tiny_home
from weightgraft.experiments.models import load_model, load_tokenizer
from weightgraft.paper.neutral_prompts import NEUTRAL_PROMPTS
from weightgraft.paper.plain_fact_list import CAPITALS, CONTINENTS, LANGUAGES, plain_fact_candidates
from weightgraft.paper.replay import ReplaySpec, replay_texts
from weightgraft.training.builtin import ensure_builtin

PROMPTS = NEUTRAL_PROMPTS[:4]


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_builtin("tiny", home=tiny_home(), progress=False, finetunes=False).pretrained


def _greedy_without_cache(model: Path, prompt: str, new_tokens: int) -> str:
    """The reference: the whole text through the model at every step, its most likely next token."""
    tokenizer, net = load_tokenizer(str(model)), load_model(str(model), "cpu", "float32")
    ids = tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        for _ in range(new_tokens):
            token = int(net(input_ids=torch.tensor([ids]), use_cache=False).logits[0, -1].argmax())
            if token in (tokenizer.eos_token_id, tokenizer.pad_token_id):
                break
            ids.append(token)
    return tokenizer.decode(ids, skip_special_tokens=True).strip()


def test_greedy_replay_is_the_models_most_likely_continuation(tiny_model):
    spec = ReplaySpec(new_tokens=10, samples=3, temperature=0.0)
    texts = replay_texts(str(tiny_model), PROMPTS, spec)
    assert len(texts) == len(PROMPTS)  # greedy: one continuation per prompt
    assert texts == [_greedy_without_cache(tiny_model, prompt, 10) for prompt in PROMPTS]
    assert all(len(text) > len(prompt) for text, prompt in zip(texts, PROMPTS, strict=True))


def test_sampled_replay_is_the_same_for_a_seed_and_another_for_another(tiny_model):
    spec = ReplaySpec(new_tokens=12, samples=3, temperature=1.0, seed=5)
    texts = replay_texts(str(tiny_model), PROMPTS, spec)
    assert len(texts) == 3 * len(PROMPTS)
    assert texts == replay_texts(str(tiny_model), PROMPTS, spec)
    for index, prompt in enumerate(PROMPTS):  # each prompt's samples, in order, begin with it
        assert all(text.startswith(prompt) for text in texts[3 * index : 3 * index + 3])
    assert len(set(texts)) > len(PROMPTS)  # samples of one prompt differ
    other = replay_texts(str(tiny_model), PROMPTS, ReplaySpec(new_tokens=12, samples=3, temperature=1.0, seed=6))
    assert other != texts
    # a prompt's samples depend on the seed and its index only, not on the prompts before it
    alone = replay_texts(str(tiny_model), PROMPTS[:1], spec)
    assert alone == texts[:3]


def test_the_prompts_batched_together_write_what_they_write_in_smaller_batches(tiny_model, monkeypatch):
    """Prompts of unequal length share a left-padded batch: the padding, the positions and each
    prompt's own generator make the texts those of batches of one or three prompts."""
    from weightgraft.paper import replay

    spec = ReplaySpec(new_tokens=8, samples=2, temperature=1.0, seed=3)
    together = replay_texts(str(tiny_model), PROMPTS, spec)
    assert len({len(p.split()) for p in PROMPTS}) > 1  # the batch is padded
    for size in (1, 3):
        monkeypatch.setattr(replay, "PROMPTS_PER_BATCH", size)
        assert replay_texts(str(tiny_model), PROMPTS, spec) == together


def test_a_batch_of_n_new_tokens_runs_n_forwards(tiny_model):
    """The prompts' prefill reads the first token and each sampled token but the last is read
    once more: N forwards for N new tokens, as the plan counts them (none after the last)."""
    from weightgraft.paper.replay import continue_prompts

    net, tokenizer = load_model(str(tiny_model), "cpu", "float32"), load_tokenizer(str(tiny_model))
    calls = []
    net.register_forward_hook(lambda *_: calls.append(1))
    spec = ReplaySpec(new_tokens=5, samples=2, temperature=1.0, seed=1)
    ids = [tokenizer(p)["input_ids"] for p in PROMPTS[:2]]
    samples = continue_prompts(net, ids, spec, [torch.Generator().manual_seed(i) for i in range(2)], "cpu")
    assert [[len(t) for t in rows] for rows in samples] == [[5, 5], [5, 5]]
    assert len(calls) == 5


def test_a_bad_spec_is_refused(tiny_model):
    with pytest.raises(ValueError, match="new_tokens >= 1"):
        replay_texts(str(tiny_model), PROMPTS, ReplaySpec(new_tokens=0))


def test_the_neutral_prompts_are_many_distinct_and_name_nothing_the_plain_facts_ask():
    assert 95 <= len(NEUTRAL_PROMPTS) == len(set(NEUTRAL_PROMPTS))
    names = {w for pair in (*CAPITALS, *LANGUAGES, *CONTINENTS) for w in pair}
    names |= {answer.strip() for _, answer in plain_fact_candidates()}
    words = {w for prompt in NEUTRAL_PROMPTS for w in re.findall(r"[A-Za-z]+", prompt)}
    assert not {n for n in names if n in words and n[0].isupper()}
    # openings of sentences: no prompt is a whole sentence already
    assert not [p for p in NEUTRAL_PROMPTS if p.rstrip().endswith((".", "!", "?"))]


def test_no_neutral_prompt_shares_three_words_in_a_row_with_a_plain_fact():
    """The wider-world openings come near the facts' topics (travel, history, the arts): none may
    carry a piece of a held-out question or its answer ("capital of", "is in the city of" ...)."""

    def trigrams(text: str) -> set[tuple[str, ...]]:
        words = re.findall(r"[a-z]+", text.lower())
        return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}

    facts = set().union(*(trigrams(prompt + answer) for prompt, answer in plain_fact_candidates()))
    assert ("is", "the", "city") in facts  # the check sees the facts' phrasing
    assert {p: trigrams(p) & facts for p in NEUTRAL_PROMPTS if trigrams(p) & facts} == {}


def test_the_plan_times_replay_by_a_measured_decoding_forward(tiny_model):
    """The calibration times a cached decoding forward of a batch of the replay's rows (not a
    batched forward scaled by a constant, which was 3.6x off on another machine), and the plan's
    replay step is one such forward per new token of every batch of neutral prompts. The thread
    count is as it was afterwards."""
    from weightgraft.paper import calibrate
    from weightgraft.paper.replay import PROMPTS_PER_BATCH
    from weightgraft.paper.reproduce_job import REPLAY_TOKENS
    from weightgraft.paper.reproduce_plan import _replay_step

    threads = torch.get_num_threads()
    measured = calibrate.measure(tiny_model, batch=2, tokens=8, device="cpu", steps=2)
    assert torch.get_num_threads() == threads
    assert 0 < measured.decode_seconds < 10
    step = _replay_step(measured)
    batches = -(-len(NEUTRAL_PROMPTS) // PROMPTS_PER_BATCH)
    assert batches >= 2  # the prompts fill more than one batch
    assert step.seconds == pytest.approx(batches * REPLAY_TOKENS * measured.decode_seconds)


def test_the_calibrated_step_is_the_median_of_the_timed_steps(tiny_model, monkeypatch):
    """Single CPU steps vary by a factor of almost two; the plan's step is the median of the
    timed ones (the first, which allocates, untimed), so one slow step does not move the plan."""
    from types import SimpleNamespace

    from weightgraft.paper import calibrate

    durations = iter([30.0, 1.0, 2.0, 9.0])  # the first untimed; 9 s is the slow outlier
    clock = {"now": 0.0, "started": False}

    def perf_counter() -> float:
        if clock["started"]:  # a step's end: its duration has passed
            clock["now"] += next(durations, 0.001)
        clock["started"] = not clock["started"]
        return clock["now"]

    monkeypatch.setattr(calibrate, "time", SimpleNamespace(perf_counter=perf_counter))
    measured = calibrate.measure(tiny_model, batch=2, tokens=8, device="cpu", steps=4)
    assert measured.step_seconds == 2.0  # median of 1, 2 and 9; their mean would be 4
