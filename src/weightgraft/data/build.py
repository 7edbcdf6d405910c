"""Building dataset directories from facts: training texts, validation and evaluation prompts.

Validation choice (why it does not leak facts): the checkpoint is chosen on the *trained* facts
asked in validation wordings (`VALIDATION_TEMPLATES`) that appear in no training text and in no
evaluation prompt. A split over training sentences would validate on facts the model read
verbatim (it measures recall of sentences, not retrieval), and validating on the evaluation
prompts would tune the reported number on itself. Held-out facts cannot be validated on at all:
nothing could predict them. So validation measures the same skill as evaluation (retrieving a
trained fact from a wording not trained on) with its own wordings.
"""

from __future__ import annotations

import bisect
import random
from pathlib import Path
from typing import Literal

from weightgraft.data.freetext import freetext_article
from weightgraft.data.io import write_dataset
from weightgraft.data.schema import EvalPrompt, RelationFact
from weightgraft.data.templates import (
    ARTICLE_TEMPLATES,
    EVAL_TEMPLATES,
    QA_TEMPLATES,
    TITLE_FREE_TEMPLATES,
    VALIDATION_TEMPLATES,
    eval_prompts_for,
    render_training,
)

Order = Literal["both", "a2b", "b2a"]
ONE_DIRECTION: tuple[Order, ...] = ("a2b", "b2a")


def template_texts(
    facts: list[RelationFact], seed: int, texts_per_fact: int, order: Order = "both", title_free_per_fact: int = 0
) -> list[str]:
    """Per fact: alternately an article and a QA text. `order="both"`: alternately in the two
    orders, every (template, order) pair used once before any repeats. `"a2b"` names the first
    actor before the second in every text, `"b2a"` the second before the first (the reversal
    task's training set: the format, without the forward relation).

    `title_free_per_fact` more texts per fact from `TITLE_FREE_TEMPLATES` (the fact without its
    film), in the same order rule, drawn with their own random stream: with 0 the texts are the
    same bytes as before the option existed."""
    if order not in ("both", "a2b", "b2a"):
        raise ValueError(f"unknown order {order!r}; use both, a2b or b2a")
    if texts_per_fact < 2:
        raise ValueError("texts_per_fact must be at least 2 (one text in each order)")
    rng = random.Random(f"texts-{seed}")
    texts = []
    for fact in facts:
        articles = rng.sample(list(ARTICLE_TEMPLATES.values()), len(ARTICLE_TEMPLATES))
        questions = rng.sample(list(QA_TEMPLATES.values()), len(QA_TEMPLATES))
        for i in range(texts_per_fact):
            source = articles if i % 2 == 0 else questions
            m = i // 2
            n = len(source)
            if order == "both":
                reverse = ((m % n) + (m // n)) % 2 == 1
            else:
                reverse = order == "b2a"
            texts.append(render_training(source[m % n], fact, reverse=reverse))
    rng.shuffle(texts)
    if title_free_per_fact:
        texts = _with_title_free(texts, facts, seed, title_free_per_fact, order)
    return texts


def _with_title_free(texts: list[str], facts: list[RelationFact], seed: int, per_fact: int, order: Order) -> list[str]:
    """`texts` plus `per_fact` title-free texts per fact, shuffled in. In both orders each
    template is used once per order before any repeats."""
    rng = random.Random(f"title-free-{seed}")
    out = list(texts)
    for fact in facts:
        pool = rng.sample(list(TITLE_FREE_TEMPLATES.values()), len(TITLE_FREE_TEMPLATES))
        for i in range(per_fact):
            if order == "both":
                template, reverse = pool[(i // 2) % len(pool)], i % 2 == 1
            else:
                template, reverse = pool[i % len(pool)], order == "b2a"
            out.append(render_training(template, fact, reverse=reverse))
    rng.shuffle(out)
    return out


def freetext_texts(facts: list[RelationFact], seed: int, articles_per_fact: int) -> list[str]:
    rng = random.Random(f"freetext-{seed}")
    texts = [freetext_article(fact, rng) for fact in facts for _ in range(articles_per_fact)]
    rng.shuffle(texts)
    return texts


def check_no_leak(train_texts: list[str], prompts: list[EvalPrompt], strict: bool = True) -> None:
    """No prompt may be a prefix of a training text (`strict`: nor appear anywhere inside one).

    Linear in the data, not prompts x texts: prefixes are found by bisection in the sorted texts,
    and (strict) a prompt of three or more words is looked for only in the texts holding its
    rarest inner word (a word of a prompt other than its first and last lies whole, between
    whitespace, in any text that contains the prompt). The first leak reported is the one the
    plain double loop over prompts and texts would meet first."""
    texts = list(train_texts)
    leak = (_first_substring_leak if strict else _first_prefix_leak)(texts, [p.text for p in prompts])
    if leak is not None:
        prompt_index, text_index = leak
        prompt, text = prompts[prompt_index], texts[text_index]
        raise ValueError(
            f"prompt {prompt.id} {prompt.text!r} appears in the training text {text[:120]!r}; "
            "evaluation wording must differ from training wording"
        )


def _first_prefix_leak(texts: list[str], prompts: list[str]) -> tuple[int, int] | None:
    """(prompt, text) indices of the first prompt that starts some text, with its first such text."""
    order = sorted(range(len(texts)), key=texts.__getitem__)
    ordered = [texts[i] for i in order]
    for p_index, prompt in enumerate(prompts):
        start = bisect.bisect_left(ordered, prompt)
        hits = []
        for position in range(start, len(ordered)):
            if not ordered[position].startswith(prompt):
                break  # the texts that start with `prompt` are one run of the sorted list
            hits.append(order[position])
        if hits:
            return p_index, min(hits)
    return None


def _first_substring_leak(texts: list[str], prompts: list[str]) -> tuple[int, int] | None:
    """(prompt, text) indices of the first prompt inside some text, with its first such text."""
    inner = [set(prompt.split()[1:-1]) for prompt in prompts]
    wanted = set().union(*inner) if inner else set()
    frequency: dict[str, int] = dict.fromkeys(wanted, 0)
    for text in texts:
        for word in wanted.intersection(text.split()):
            frequency[word] += 1
    key = [min(words, key=lambda w: (frequency[w], w)) if words else None for words in inner]
    postings: dict[str, list[int]] = {word: [] for word in key if word is not None}
    for t_index, text in enumerate(texts):
        for word in postings.keys() & set(text.split()):
            postings[word].append(t_index)
    everything = range(len(texts))
    for p_index, prompt in enumerate(prompts):
        candidates = everything if key[p_index] is None else postings[key[p_index]]
        for t_index in candidates:
            if prompt in texts[t_index]:
                return p_index, t_index
    return None


def build_dataset(
    directory: Path,
    facts: list[RelationFact],
    seed: int,
    style: str = "templates",
    texts_per_fact: int = 16,
    articles: list[str] | None = None,
    extra_options: dict | None = None,
    order: Order = "both",
    title_free_per_fact: int = 0,
) -> Path:
    """Write one dataset directory. `style`: "templates", "freetext" (generated articles), or
    "articles" (the user's `articles` as training text). `order` (templates only): "both", or
    one direction ("a2b", "b2a"); a one-direction set keeps the full evaluation set (both
    directions, so the untrained direction can be measured) and validates on its own direction.
    `title_free_per_fact` (templates only): title-free texts per fact besides `texts_per_fact`."""
    ids = [f.id for f in facts]
    if len(set(ids)) != len(ids):
        raise ValueError("fact ids must be unique within a dataset")
    if order != "both" and style != "templates":
        raise ValueError(f'order {order!r} needs style "templates" (only template texts have a known order)')
    if title_free_per_fact and style != "templates":
        raise ValueError(f'title_free_per_fact needs style "templates", not {style!r}')
    if style == "templates":
        train = template_texts(facts, seed, texts_per_fact, order, title_free_per_fact)
    elif style == "freetext":
        train = freetext_texts(facts, seed, texts_per_fact)
    elif style == "articles":
        if not articles:
            raise ValueError('style "articles" needs the articles (a JSONL of {"text": ...})')
        train = list(articles)
    else:
        raise ValueError(f"unknown style {style!r}; use templates, freetext or articles")
    validation = [p for f in facts for p in eval_prompts_for(f, VALIDATION_TEMPLATES)]
    if order != "both":  # forward prompts ask A->B, reversed ones B->A
        validation = [p for p in validation if p.reversed == (order == "b2a")]
    evaluation = [p for f in facts for p in eval_prompts_for(f, EVAL_TEMPLATES)]
    check_no_leak(train, validation + evaluation, strict=style != "articles")
    options = {"style": style, "texts_per_fact": texts_per_fact, "order": order, **(extra_options or {})}
    if title_free_per_fact:  # recorded only when used: older manifests keep their bytes
        options["title_free_per_fact"] = title_free_per_fact
    return write_dataset(Path(directory), facts, train, validation, evaluation, seed, options)


def split_disjoint(facts: list[RelationFact], sizes: dict[str, int]) -> dict[str, list[RelationFact]]:
    """Consecutive, non-overlapping slices (facts come interleaved by kind, so each slice mixes kinds)."""
    if sum(sizes.values()) > len(facts):
        raise ValueError(f"asked for {sum(sizes.values())} facts in all, only {len(facts)} generated")
    out, start = {}, 0
    for name, n in sizes.items():
        out[name] = facts[start : start + n]
        start += n
    return out


def split_by_kind(facts: list[RelationFact], sizes: dict[str, dict[str, int]]) -> dict[str, list[RelationFact]]:
    """Disjoint sets with a chosen number of facts of each kind: `sizes[set][kind]`. Each kind's
    facts are sliced in order; every set comes back interleaved by kind."""
    by_kind: dict[str, list[RelationFact]] = {}
    for fact in facts:
        by_kind.setdefault(fact.kind, []).append(fact)
    cursor = {kind: 0 for kind in by_kind}
    out = {}
    for name, counts in sizes.items():
        chosen = {}
        for kind, n in counts.items():
            start = cursor.get(kind, 0)
            if start + n > len(by_kind.get(kind, [])):
                raise ValueError(
                    f"set {name!r} asks for {n} {kind} facts; only {len(by_kind.get(kind, [])) - start} are left"
                )
            chosen[kind] = by_kind[kind][start : start + n]
            cursor[kind] = start + n
        interleaved = []
        for index in range(max((len(v) for v in chosen.values()), default=0)):
            interleaved += [part[index] for part in chosen.values() if index < len(part)]
        out[name] = interleaved
    return out
