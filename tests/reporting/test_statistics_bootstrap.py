"""The fact-clustered paired bootstrap against known answers: coverage on synthetic data with a
known between-fact variance (and under-coverage when prompts are resampled instead), the
ratio-of-sums and weighted-median rules against expanded samples, and pairing."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from weightgraft.reporting.experiment_stats import experiment_stats, interval_rows
from weightgraft.reporting.statistics import (
    ALL,
    clustered_means,
    clustered_median,
    draw_fact_counts,
    fact_index,
    fact_sums,
    percentile_interval,
)

FACTS, PROMPTS = 30, 14


def _frame(values: np.ndarray, cluster_by_prompt: bool = False) -> pl.DataFrame:
    """One condition per row of `values` [D, FACTS * PROMPTS] (each an independent dataset), its
    per-prompt value in `prob`; two templates alternate over a fact's prompts."""
    datasets, n = values.shape
    fact = np.repeat(np.arange(FACTS), PROMPTS)
    example = [f"e{i}" for i in range(n)]
    return pl.DataFrame(
        {
            "condition": np.repeat([f"d{d}" for d in range(datasets)], n),
            "example_id": example * datasets,
            "fact_id": ([f"e{i}" for i in range(n)] if cluster_by_prompt else [f"f{f}" for f in fact]) * datasets,
            "template": [("a", "b")[i % 2] for i in range(n)] * datasets,
            "applicable": np.ones(datasets * n, dtype=bool),
            "rank": np.ones(datasets * n, dtype=np.int64),
            "prob": values.ravel(),
            "target_logprob": np.zeros(datasets * n),
            "exact_match": np.zeros(datasets * n, dtype=bool),
        }
    )


def _coverage(cluster_by_prompt: bool) -> float:
    """Share of 300 synthetic datasets whose 95% interval of the mean covers the true mean 0.
    Fact effects have variance 1, prompt noise variance 1: prompts of a fact are correlated
    (intraclass correlation 0.5), so a prompt bootstrap's standard error is about
    sqrt(1 + 13 * 0.5) = 2.7 times too small."""
    hits = []
    for seed in range(6):
        rng = np.random.default_rng(seed)
        effects = rng.normal(0, 1, size=(50, FACTS))
        values = np.repeat(effects, PROMPTS, axis=1) + rng.normal(0, 1, size=(50, FACTS * PROMPTS))
        stats = experiment_stats(_frame(values, cluster_by_prompt), 500, [seed, 99], metrics=["prob"])
        low, high = percentile_interval(stats.samples[:, :, -1, 0])
        hits.append((low <= 0) & (0 <= high))
    return float(np.concatenate(hits).mean())


def test_fact_bootstrap_has_nominal_coverage_and_prompt_bootstrap_does_not():
    # The production path (experiment_stats) resamples facts: about 95% (the percentile
    # interval with 30 clusters runs a little under nominal; measured 0.913). Were it to resample
    # prompts, this assertion fails: the companion below shows the same harness then covers far
    # less often. Monte-Carlo bands: 300 datasets give a binomial SE of about 0.013 at 0.95, so
    # the band is nominal -5 SE (room for the small-cluster shortfall) to +3 SE.
    assert 0.88 <= _coverage(cluster_by_prompt=False) <= 0.985
    # Resampling prompts, the interval is 2.7 times too narrow: expected coverage
    # P(|Z| < 1.96 / 2.7) = 0.53 (measured 0.543); 0.65 is 4 SE (0.029) above that.
    assert _coverage(cluster_by_prompt=True) < 0.65


def test_ratio_of_sums_equals_mean_of_expanded_sample():
    rng = np.random.default_rng(1)
    index = rng.integers(0, 7, size=60)  # unequal prompt counts per fact
    values = rng.normal(size=(60, 3))
    values[rng.random((60, 3)) < 0.2] = np.nan  # prompts a column does not cover
    sums, sizes = fact_sums(index, values, 7)
    counts = draw_fact_counts(7, 50, 3)
    point, samples = clustered_means(counts, sums, sizes)
    # float64 default rtol 1e-7: a ratio of sums vs the mean of the expanded sample, summed in
    # another order
    np.testing.assert_allclose(point, np.nanmean(values, axis=0))
    for r in range(50):
        repeat = counts[r].astype(int)[index]
        expanded = np.repeat(values, repeat, axis=0)
        expected = np.array([np.mean(col[~np.isnan(col)]) if (~np.isnan(col)).any() else np.nan for col in expanded.T])
        np.testing.assert_allclose(samples[r], expected, equal_nan=True)


def test_weighted_median_equals_median_of_expanded_sample():
    rng = np.random.default_rng(2)
    index = rng.integers(0, 9, size=41)
    values = rng.integers(1, 12, size=41).astype(float)  # ties, as ranks have
    values[3] = np.nan
    counts = draw_fact_counts(9, 200, 4)
    point, samples = clustered_median(counts, index, values)
    keep = ~np.isnan(values)
    assert point == np.median(values[keep])
    for r in range(200):
        expanded = np.repeat(values[keep], counts[r].astype(int)[index[keep]])
        expected = np.median(expanded) if len(expanded) else np.nan
        assert samples[r] == expected or (np.isnan(expected) and np.isnan(samples[r]))


def test_resamples_draw_whole_facts_and_are_seeded():
    counts = draw_fact_counts(20, 300, [5, 6])
    assert counts.shape == (300, 20) and (counts.sum(1) == 20).all()
    np.testing.assert_array_equal(counts, draw_fact_counts(20, 300, [5, 6]))
    assert not np.array_equal(counts, draw_fact_counts(20, 300, [5, 7]))
    # Each fact is drawn once per resample on average (exactly: each resample draws 20, checked
    # above), with a binomial(20, 1/20) spread: variance 0.95. Its estimate from 6000 counts has
    # an SE of about 0.02 (fourth central moment 3.39), so the band is 4 SE.
    assert abs(counts.var() - 0.95) < 0.08
    facts, index = fact_index(["b", "a", "b", "c", "a"])
    assert list(facts) == ["b", "a", "c"] and list(index) == [0, 1, 0, 2, 1]


def test_differences_are_paired_through_shared_resamples():
    # B is A plus 0.1 on every prompt: every shared resample gives a difference of exactly
    # 0.1, whatever the spread of A itself; A's own interval is wide.
    rng = np.random.default_rng(3)
    a = np.repeat(rng.normal(size=FACTS), PROMPTS) + rng.normal(size=FACTS * PROMPTS)
    stats = experiment_stats(_frame(np.stack([a, a + 0.1])), 500, 0, metrics=["prob"])
    diff = stats.samples[:, 1, -1, 0] - stats.samples[:, 0, -1, 0]
    np.testing.assert_allclose(diff, 0.1)  # float64 default rtol 1e-7: 0.1 is not exact in binary
    _, low, high = stats.estimate("d0", ALL, "prob")
    assert high - low > 0.5


def test_rows_report_prompts_and_facts_and_skip_not_applicable():
    values = np.zeros((1, FACTS * PROMPTS))
    frame = _frame(values).with_columns(
        applicable=pl.col("template") == "a", rank=pl.Series(np.arange(FACTS * PROMPTS) % 3 + 1)
    )
    stats = experiment_stats(frame, 200, 0, metrics=["top1", "rank_median"])
    rows = {(r.template, r.metric): r for r in interval_rows(stats, {}, "clean")}
    assert rows[("a", "top1")].n == FACTS * PROMPTS // 2
    assert rows[("a", "top1")].n_facts == FACTS
    assert rows[("b", "top1")].n == 0 and rows[("b", "top1")].value is None
    assert rows[("b", "top1")].ci_low is None
    ranks = np.arange(FACTS * PROMPTS) % 3 + 1
    on_a = ranks[::2]
    assert rows[(ALL, "top1")].value == pytest.approx((on_a == 1).mean())
    assert rows[(ALL, "rank_median")].value == np.median(on_a)


def test_percentile_interval_matches_numpy_and_leaves_out_undefined_resamples():
    rng = np.random.default_rng(6)
    samples = rng.normal(size=(501, 6, 2))
    samples[rng.random(samples.shape) < 0.1] = np.nan
    samples[:, 2, 1] = np.nan  # never defined
    low, high = percentile_interval(samples)
    for c in range(6):
        for m in range(2):
            column = samples[:, c, m][~np.isnan(samples[:, c, m])]
            if len(column) == 0:
                assert np.isnan(low[c, m]) and np.isnan(high[c, m])
            else:
                assert (low[c, m], high[c, m]) == pytest.approx(tuple(np.percentile(column, [2.5, 97.5])))


def test_mean_rank_beside_median_and_mrr_on_a_hand_computed_example():
    # Two facts of two prompts: fact f0 ranks 1 and 3, fact f1 ranks 2 and 10. Mean rank
    # (1+3+2+10)/4 = 4, median 2.5, MRR (1 + 1/3 + 1/2 + 1/10)/4. A fact-clustered resample
    # draws f0 twice (mean 2), f1 twice (mean 6) or one of each (mean 4), each of the first two
    # with probability 1/4, so the 95% interval is exactly [2, 6].
    frame = pl.DataFrame(
        {
            "condition": ["c"] * 4,
            "example_id": ["e0", "e1", "e2", "e3"],
            "fact_id": ["f0", "f0", "f1", "f1"],
            "template": ["a", "b", "a", "b"],
            "applicable": [True] * 4,
            "rank": [1, 3, 2, 10],
            "prob": [0.5] * 4,
            "target_logprob": [0.0] * 4,
            "exact_match": [False] * 4,
        }
    )
    stats = experiment_stats(frame, 400, 0, metrics=["rank_mean", "rank_median", "mrr"])
    rows = {(r.template, r.metric): r for r in interval_rows(stats, {}, "clean")}
    assert rows[(ALL, "rank_mean")].value == 4.0
    assert rows[(ALL, "rank_median")].value == 2.5
    assert rows[(ALL, "mrr")].value == pytest.approx((1 + 1 / 3 + 1 / 2 + 1 / 10) / 4, abs=1e-12)
    assert (rows[(ALL, "rank_mean")].ci_low, rows[(ALL, "rank_mean")].ci_high) == (2.0, 6.0)
    assert rows[("a", "rank_mean")].value == 1.5  # ranks 1 and 2
    assert rows[("b", "rank_mean")].value == 6.5  # ranks 3 and 10
