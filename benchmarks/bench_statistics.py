"""Statistics benchmark, measured in one run on this machine (CPU time, one thread).

The fact-clustered paired bootstrap of one experiment (`experiment_stats`) on a demo-sized
synthetic experiment: 100 facts x 14 prompts (4 templates) x 40 conditions, 2000 resamples,
(a) the three verdict metrics (top-5, probability, target log-probability) and (b) every summary
metric (rank_median included); printed beside the per-prompt bootstrap it replaced
(`bootstrap_many`, one condition x template at a time) as a ratio.

Usage: OMP_NUM_THREADS=1 python benchmarks/bench_statistics.py
"""

from __future__ import annotations

import time
import zlib

import numpy as np
import polars as pl

from weightgraft.experiments.metrics import example_metric
from weightgraft.experiments.vocabulary import SUMMARY_METRICS
from weightgraft.reporting.experiment_stats import experiment_stats, interval_rows, recovery_rows

FACTS, PROMPTS, CONDITIONS, RESAMPLES = 100, 14, 40, 2000
TEMPLATES = ["t1", "t2", "t3", "t4"]


def _stat(values: np.ndarray, metric: str, axis=None):
    return np.median(values, axis=axis) if metric == "rank_median" else np.mean(values, axis=axis)


def bootstrap_many(
    values: dict[str, np.ndarray], resamples: int, seed_key: str, seed: int
) -> dict[str, tuple[float, float, float]]:
    """The per-prompt bootstrap that `experiment_stats` replaced, kept here as the benchmark's
    baseline: point estimates and percentile 95% intervals over examples for several metrics of
    the same examples, all from the same resamples.

    The generator is seeded from the run seed and `seed_key` (experiment/condition/template),
    so an interrupted and resumed run reproduces every interval exactly."""
    n = len(next(iter(values.values())))
    if n == 0:
        return {m: (float("nan"),) * 3 for m in values}
    points = {m: float(_stat(v, m)) for m, v in values.items()}
    if resamples == 0 or n == 1:
        return {m: (p, p, p) for m, p in points.items()}
    rng = np.random.default_rng([seed, zlib.crc32(seed_key.encode())])
    stats: dict[str, list] = {m: [] for m in values}
    done = 0
    while done < resamples:  # bounded memory for large example sets
        take = min(resamples - done, max(1, 2_000_000 // n))
        idx = rng.integers(0, n, size=(take, n))
        for m, v in values.items():
            stats[m].append(_stat(v[idx], m, axis=1))
        done += take
    out = {}
    for m, chunks in stats.items():
        low, high = np.percentile(np.concatenate(chunks), [2.5, 97.5])
        out[m] = (points[m], float(low), float(high))
    return out


def synthetic_frame(seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    n = FACTS * PROMPTS
    parts = []
    for c in ["PRE", "SFT"] + [f"C{i}" for i in range(CONDITIONS - 2)]:
        parts.append(
            pl.DataFrame(
                {
                    "condition": [c] * n,
                    "example_id": [f"e{i}" for i in range(n)],
                    "fact_id": [f"f{i // PROMPTS}" for i in range(n)],
                    "template": [TEMPLATES[i % 4] for i in range(n)],
                    "applicable": [True] * n,
                    "rank": np.minimum(rng.zipf(1.3, n), 5000),
                    "prob": rng.random(n),
                    "target_logprob": -5 * rng.random(n),
                    "exact_match": rng.random(n) < 0.3,
                }
            )
        )
    return pl.concat(parts)


def cpu(fn) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def clustered(frame: pl.DataFrame, metrics) -> None:
    stats = experiment_stats(frame, RESAMPLES, [0, 1], name="bench", metrics=metrics)
    interval_rows(stats, {}, "clean")
    recovery_rows(stats, "PRE", "SFT")


def per_prompt(frame: pl.DataFrame, metrics) -> None:
    for cond, part in frame.partition_by("condition", as_dict=True).items():
        for template in [*TEMPLATES, "ALL"]:
            chosen = part if template == "ALL" else part.filter(pl.col("template") == template)
            cols = {k: chosen[k].to_numpy() for k in ("rank", "prob", "target_logprob", "exact_match")}
            values = {m: example_metric(cols, m) for m in metrics}
            bootstrap_many(values, RESAMPLES, f"{cond}/{template}", 0)


def main() -> None:
    frame = synthetic_frame()
    print(f"{FACTS} facts x {PROMPTS} prompts x {CONDITIONS} conditions, {RESAMPLES} resamples (CPU seconds)")
    for label, metrics in (
        ("verdict metrics (3)", ["top5", "prob", "target_logprob"]),
        (f"every summary metric ({len(SUMMARY_METRICS)})", SUMMARY_METRICS),
    ):
        ours = cpu(lambda metrics=metrics: clustered(frame, metrics))
        old = cpu(lambda metrics=metrics: per_prompt(frame, metrics))
        print(
            f"{label}: clustered paired bootstrap {ours:.2f} s (intervals, recovery); "
            f"per-prompt bootstrap per condition {old:.2f} s; ratio old/new {old / ours:.1f}x"
        )


if __name__ == "__main__":
    main()
