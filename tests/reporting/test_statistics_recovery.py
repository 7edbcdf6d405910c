"""Recovery (C - PRE) / (SFT - PRE) with its paired interval, and the paired sign-flip test,
against known answers."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import polars as pl
import pytest

from weightgraft.reporting.experiment_stats import experiment_stats, recovery_rows
from weightgraft.reporting.statistics import (
    ALL,
    draw_fact_counts,
    paired_test,
    recovery,
    sign_flip_p_value,
)

FACTS, PROMPTS = 40, 14


def _frame(top1: dict[str, np.ndarray]) -> pl.DataFrame:
    """Conditions named by `top1`'s keys, each prompt's success (top-1) as rank 1 or 7."""
    n = FACTS * PROMPTS
    parts = []
    for name, hit in top1.items():
        parts.append(
            pl.DataFrame(
                {
                    "condition": [name] * n,
                    "example_id": [f"e{i}" for i in range(n)],
                    "fact_id": [f"f{i // PROMPTS}" for i in range(n)],
                    "template": ["t"] * n,
                    "applicable": [True] * n,
                    "rank": np.where(hit, 1, 7).astype(np.int64),
                    "prob": hit.astype(float),
                    "target_logprob": np.log(np.where(hit, 0.9, 0.1)),
                    "exact_match": hit.astype(bool),
                }
            )
        )
    return pl.concat(parts)


def _replicate(rng, pre: float, sft: float, cond: float) -> pl.DataFrame:
    """Per-fact success probabilities share a fact difficulty (so conditions are correlated
    within a fact, as real ones are); its mean is 0, so the true means are pre, sft, cond."""
    difficulty = np.repeat(rng.uniform(-0.1, 0.1, FACTS), PROMPTS)
    draw = rng.random(FACTS * PROMPTS)  # one draw per prompt, shared: successes are nested
    return _frame({name: draw < p + difficulty for name, p in (("PRE", pre), ("SFT", sft), ("C", cond))})


def test_recovery_interval_covers_the_true_ratio():
    # True ratio (0.62 - 0.2) / (0.9 - 0.2) = 0.6.
    rng = np.random.default_rng(0)
    covered, values = [], []
    for replicate in range(120):
        stats = experiment_stats(_replicate(rng, 0.2, 0.9, 0.62), 400, [replicate, 1], metrics=["top1"])
        r = stats.recovery("C", "PRE", "SFT", ALL, "top1")
        assert r.defined and r.low <= r.value <= r.high
        covered.append(r.low <= 0.6 <= r.high)
        values.append(r.value)
    # Monte-Carlo: the 120 recoveries spread with SD 0.025 (measured), so their mean has an SE of
    # 0.0023; 0.02 also leaves room for the ratio estimator's small bias (measured mean 0.598).
    assert abs(np.mean(values) - 0.6) < 0.02
    # 120 intervals: binomial SE 0.02 at 0.95, so 0.88 is 3.5 SE under nominal (measured 0.958).
    # Only under-coverage is tested here.
    assert 0.88 <= np.mean(covered) <= 1.0


def test_recovery_of_the_baselines_is_exactly_zero_and_one():
    stats = experiment_stats(_replicate(np.random.default_rng(1), 0.2, 0.9, 0.5), 300, 0, metrics=["top1", "prob"])
    pre = stats.recovery("PRE", "PRE", "SFT", ALL, "top1")
    sft = stats.recovery("SFT", "PRE", "SFT", ALL, "prob")
    assert (pre.value, pre.low, pre.high) == (0.0, 0.0, 0.0)
    assert (sft.value, sft.low, sft.high) == (1.0, 1.0, 1.0)


def test_recovery_is_undefined_without_a_finetuning_gain():
    rng = np.random.default_rng(2)
    hit = rng.random(FACTS * PROMPTS) < 0.5
    stats = experiment_stats(_frame({"PRE": hit, "SFT": hit.copy(), "C": ~hit}), 200, 0, metrics=["top1"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no division-by-zero warnings either
        r = stats.recovery("C", "PRE", "SFT", ALL, "top1")
        rows = recovery_rows(stats, "PRE", "SFT", metrics=["top1"])
    assert not r.defined and np.isnan(r.value) and "undefined" in r.reason
    assert all(not row.defined and row.recovery is None for row in rows)
    # a gap whose interval includes 0 is undefined too, even if the point is not 0
    samples = np.array([-0.05, 0.02, 0.04, 0.06, 0.1])
    assert not recovery(0.5, 0.0, 0.03, samples * 0, samples * 0, samples).defined


def test_sign_flip_p_value_equals_full_enumeration():
    rng = np.random.default_rng(3)
    d = rng.normal(0.3, 1, size=14)
    signs = np.array(list(itertools.product([-1, 1], repeat=14)))
    # 1e-12: the all-plus pattern (and its mirror) reproduce |d.sum()| only up to float64
    # summation order, and must count as at least as extreme
    expected = np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12)
    p, patterns, exact = sign_flip_p_value(d, 20000, 0)
    assert exact and patterns == 2**14 and p == pytest.approx(expected)
    # Monte Carlo (fewer permutations than patterns) agrees within its error
    p_mc, patterns_mc, exact_mc = sign_flip_p_value(d, 5000, 1)
    assert not exact_mc and patterns_mc == 5000
    assert abs(p_mc - expected) < 4 * np.sqrt(expected * (1 - expected) / 5000)  # 4 binomial SE
    # every fact favours A: the smallest two-sided p-value, 2 / 2**10
    assert sign_flip_p_value(np.ones(10), 5000, 0)[0] == pytest.approx(2 / 1024)


def test_paired_test_difference_effect_size_and_counts():
    rng = np.random.default_rng(4)
    index = np.repeat(np.arange(12), 5)
    per_fact = rng.normal(0.2, 0.1, size=12)
    b = rng.random(60)
    a = b + per_fact[index]
    a[7] = np.nan  # a prompt A does not cover is left out of both
    result = paired_test(draw_fact_counts(12, 500, 0), index, a, b, 12, permutations=5000)
    keep = ~np.isnan(a)
    diff = (a - b)[keep]
    assert result.difference == pytest.approx(diff.mean())
    fact_means = np.array([diff[index[keep] == f].mean() for f in range(12)])
    assert result.effect_size == pytest.approx(fact_means.mean() / fact_means.std(ddof=1))
    assert (result.n_facts, result.n_prompts) == (12, 59)
    assert result.low < diff.mean() < result.high and result.low > 0
    assert result.p_value == pytest.approx(2 / 4096)  # all 12 facts positive, exact
