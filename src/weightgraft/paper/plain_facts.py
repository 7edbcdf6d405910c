"""What finetuning kept of the pretrained model's knowledge: a held-out set of plain facts, built
on the model (the candidates PRE answers at top-1) and scored by each finetune, with intervals.

Scoring the five fixed world facts of before said little: a model need not know them, and five
facts give no interval. Here the set is the candidates (`plain_fact_list`, or any list of
(prompt, answer)) that the pretrained model answers at top-1 (the answer's first token, after the
prompt, teacher-forced as the tokenizer splits prompt + answer); PRE's accuracy on it is 1 by
construction, and each finetune's top-1 and top-5 on the same facts says how much it kept. The
intervals are percentile bootstraps over the facts (`reporting.statistics`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from weightgraft.codec import dump, load
from weightgraft.data.batching import right_pad
from weightgraft.experiments.models import load_model, load_tokenizer
from weightgraft.reporting.statistics import draw_fact_counts, interval_of, seed_for


@dataclass(frozen=True)
class Kept:
    """One model's score on the held-out facts: top-1 and top-5 shares with 95% intervals."""

    model: str
    top1: float
    top1_interval: tuple[float, float]
    top5: float
    top5_interval: tuple[float, float]


@dataclass(frozen=True)
class HeldOutKnowledge:
    """The held-out check of one job: how many candidates there were, the facts PRE knows (the
    set), how many this tokenizer cannot ask, and every model's score on the set (PRE first)."""

    candidates: int
    facts: list[tuple[str, str]]
    unasked: int
    scores: list[Kept]

    def record(self) -> dict:
        """The check as JSON (a ledger step's outputs), read back by `from_record`."""
        return dump(self)

    @classmethod
    def from_record(cls, body: dict) -> HeldOutKnowledge:
        return load(cls, body)


def answer_ids(tokenizer, facts: list[tuple[str, str]]) -> list[tuple[list[int], int] | None]:
    """Each fact as (the prompt's token ids, the answer's first token id), as the tokenizer
    splits prompt + answer; None where this tokenizer merges the answer into the prompt's last
    token (the fact cannot be asked of this model: counted apart in the report)."""
    out: list[tuple[list[int], int] | None] = []
    for prompt, answer in facts:
        ids = tokenizer(prompt)["input_ids"]
        whole = tokenizer(prompt + answer)["input_ids"]
        usable = len(whole) > len(ids) and whole[: len(ids)] == ids
        out.append((list(ids), int(whole[len(ids)])) if usable else None)
    return out


def answer_ranks(
    model, encoded: list[tuple[list[int], int] | None], device: str = "cpu", batch_size: int = 64
) -> np.ndarray:
    """The rank (1 = top-1) of each fact's answer token after its prompt (0 where not asked).

    The prompts run `batch_size` at a time, right-padded (a causal model's logits at a prompt's
    last token do not see the padding after it, so any token id pads), grouped by length so that
    little is padding:
    one prompt a forward took 92 s of a 62-minute laptop job for 5 models x 198 facts."""
    ranks = np.zeros(len(encoded), dtype=np.int64)
    asked = sorted((i for i, item in enumerate(encoded) if item is not None), key=lambda i: len(encoded[i][0]))
    with torch.no_grad():
        for start in range(0, len(asked), batch_size):
            rows = asked[start : start + batch_size]
            ids, mask = right_pad([encoded[i][0] for i in rows], 0)
            logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            last = logits[torch.arange(len(rows)), mask.sum(dim=1).to(logits.device) - 1]
            targets = torch.tensor([encoded[i][1] for i in rows], device=logits.device)
            above = (last > last.gather(1, targets[:, None])).sum(dim=1) + 1
            ranks[rows] = above.cpu().numpy()
    return ranks


def _share(hits: np.ndarray, counts: np.ndarray) -> tuple[float, tuple[float, float]]:
    """The share of hits and its bootstrap interval over facts (`counts`: resampled draws)."""
    if not len(hits):
        return float("nan"), (float("nan"), float("nan"))
    samples = counts @ hits.astype(float) / len(hits)
    return float(hits.mean()), interval_of(samples)


def kept_knowledge(
    models: dict[str, str], candidates: list[tuple[str, str]], device: str = "cpu", bootstrap: int = 1000, seed: int = 0
) -> tuple[list[tuple[str, str]], list[Kept], int]:
    """The candidates PRE (`models["pre"]`) answers at top-1, and every model's score on them.

    Args:
        models: name -> model path or name; "pre" is the pretrained model that picks the facts.
        candidates: (prompt, answer) pairs; each answer starts with its own token.
        device: where the models run (float32).
        bootstrap: resamples for the intervals; seed: their seed.

    Returns:
        (the facts PRE knows, one `Kept` per model in `models`' order, the number of candidates
        this tokenizer cannot ask).
    """
    encoded = answer_ids(load_tokenizer(models["pre"]), candidates)
    ranks = {}
    for name, path in models.items():
        model = load_model(path, device, "float32")
        ranks[name] = answer_ranks(model, encoded, device)
        del model
    known = ranks["pre"] == 1
    facts = [fact for fact, hit in zip(candidates, known, strict=True) if hit]
    counts = draw_fact_counts(len(facts), bootstrap, seed_for(seed, "plain_facts"))
    scores = []
    for name, rank in ranks.items():
        top1, top1_interval = _share(rank[known] == 1, counts)
        top5, top5_interval = _share(rank[known] <= 5, counts)
        scores.append(Kept(name, top1, top1_interval, top5, top5_interval))
    return facts, scores, sum(item is None for item in encoded)


def held_out_knowledge(
    models: dict[str, str], candidates: list[tuple[str, str]], device: str = "cpu", seed: int = 0
) -> HeldOutKnowledge:
    """`kept_knowledge` as one value (the reproduce job's `knowledge` step computes it once and
    the report formats it, loading no model)."""
    facts, scores, unasked = kept_knowledge(models, candidates, device, seed=seed)
    return HeldOutKnowledge(len(candidates), facts, unasked, scores)
