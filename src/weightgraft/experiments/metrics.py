"""Per-example scores from teacher-forced logits, and bootstrap intervals over examples.

A row is a prompt followed by its target's tokens except the last; the logits at the prompt's
last token score the target's first token (the paper's measures), and the logits from there on
score the whole target (log-probability, and greedy exact match: greedy decoding reproduces the
target exactly when every teacher-forced argmax is the target token, because each step then sees
the same prefix as greedy decoding would).
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

TOP_K = (1, 5, 10, 50, 100)
# Summary metrics and how each is made from per-example columns.
SUMMARY_METRICS = ("top1", "top5", "top10", "top50", "top100", "prob", "rank_median", "mrr",
                   "target_logprob", "exact_match")


def score_rows(logits: torch.Tensor, prompt_lens: list[int], targets: list[list[int]]) -> list[dict]:
    """Scores for each row of `logits` [rows, seq, vocab] (right-padded rows).

    rank: 1 + the number of vocabulary entries with a strictly larger logit than the target's
    first token (ties count in the target's favour); prob: its softmax probability;
    target_logprob: sum of log-probabilities of all target tokens; exact_match: greedy decoding
    yields exactly the target tokens."""
    out = []
    for row, (n, target) in enumerate(zip(prompt_lens, targets)):
        steps = logits[row, n - 1 : n - 1 + len(target)].float()
        target_t = torch.tensor(target, device=steps.device)
        logp = torch.log_softmax(steps, dim=-1)
        first = steps[0]
        rank = int((first > first[target_t[0]]).sum().item()) + 1
        out.append({
            "rank": rank,
            "prob": float(logp[0, target_t[0]].exp().item()),
            "target_logprob": float(logp.gather(1, target_t[:, None]).sum().item()),
            "exact_match": bool((steps.argmax(-1) == target_t).all().item()),
            "predicted_id": int(first.argmax().item()),
        })
    return out


def example_metric(rows: dict[str, np.ndarray], metric: str) -> np.ndarray:
    """The per-example values a summary metric averages (rank_median takes their median)."""
    rank = rows["rank"].astype(float)
    if metric.startswith("top"):
        return (rank <= int(metric[3:])).astype(float)
    if metric == "rank_median":
        return rank
    if metric == "mrr":
        return 1.0 / rank
    if metric == "exact_match":
        return rows["exact_match"].astype(float)
    return rows[metric].astype(float)


def _stat(values: np.ndarray, metric: str, axis=None):
    return np.median(values, axis=axis) if metric == "rank_median" else np.mean(values, axis=axis)


def bootstrap_ci(values: np.ndarray, metric: str, resamples: int, seed_key: str, seed: int
                 ) -> tuple[float, float, float]:
    """Point estimate and percentile 95% interval over examples, deterministic for a seed.

    The generator is seeded from the run seed and `seed_key` (experiment/condition/template/
    metric), so an interrupted and resumed run reproduces every interval exactly."""
    if len(values) == 0:
        return float("nan"), float("nan"), float("nan")
    point = float(_stat(values, metric))
    if resamples == 0 or len(values) == 1:
        return point, point, point
    rng = np.random.default_rng([seed, zlib.crc32(seed_key.encode())])
    chunks, done = [], 0
    while done < resamples:  # bounded memory for large example sets
        take = min(resamples - done, max(1, 2_000_000 // len(values)))
        idx = rng.integers(0, len(values), size=(take, len(values)))
        chunks.append(_stat(values[idx], metric, axis=1))
        done += take
    stats = np.concatenate(chunks)
    low, high = np.percentile(stats, [2.5, 97.5])
    return point, float(low), float(high)
