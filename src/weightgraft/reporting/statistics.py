"""Fact-clustered paired bootstrap, recovery ratios with intervals, and sign-flip tests.

Why facts and not prompts: each fact is asked about a dozen ways (templates x directions), and
its prompts succeed or fail together. Treating prompts as independent makes intervals too
narrow. We resample facts with replacement and keep every prompt of a drawn fact.

Why one resample set per experiment: a single [resamples, facts] count matrix is drawn and shared
by every condition, template and metric. Each resample is then one replication of the whole
experiment on another draw of facts, so the interval of a difference between two conditions, or
of a recovery ratio (C - PRE) / (SFT - PRE), comes from the same resamples as the conditions'
own intervals (a paired bootstrap).

A mean over prompts under resample r is a ratio of sums, sum_f w_rf S_f / sum_f w_rf n_f, with S_f
the sum of the fact's prompt values and n_f its prompt count: facts are weighted by their prompt
count exactly as in the plain mean, and unequal counts (a condition not applicable to a template)
need no special case. All resamples of all columns are one matrix product.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

ALL = "ALL"  # the group over every template, or every fact kind: the one definition for reporting/
# Sign patterns drawn by a paired test when there are too many to try all (more than 13 facts):
# the Monte Carlo p-value's own standard error is then at most 0.5 / sqrt(10000) = 0.005, small
# beside the 0.05 it is read against. The one definition: the summary and every default use it.
PERMUTATIONS = 10000


def seed_for(seed: int, key: str) -> list[int]:
    """A reproducible generator seed from the run seed and a name (e.g. the experiment)."""
    return [int(seed), zlib.crc32(key.encode())]


def draw_fact_counts(n_facts: int, resamples: int, seed) -> np.ndarray:
    """[resamples, n_facts]: how often each fact is drawn in each bootstrap resample."""
    if n_facts <= 0 or resamples <= 0:
        return np.zeros((max(resamples, 0), max(n_facts, 0)))
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_facts, np.full(n_facts, 1.0 / n_facts), size=resamples).astype(float)


def fact_index(fact_ids) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct fact ids in first-seen order, each prompt's position among them)."""
    ids = np.asarray(fact_ids, dtype=object)
    facts, first, index = np.unique(ids, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return facts[order], rank[index.ravel()]


def fact_sums(index: np.ndarray, values: np.ndarray, n_facts: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-fact sums [F, K] and prompt counts [F, K] of `values` [N, K] (or [N]); NaN marks a
    prompt that a column does not cover (not applicable), which counts as absent."""
    values = np.asarray(values, dtype=float)
    flat = values.ndim == 1
    values = values[:, None] if flat else values
    present = ~np.isnan(values)
    onehot = np.zeros((n_facts, len(index)))
    onehot[index, np.arange(len(index))] = 1.0
    sums, sizes = onehot @ np.where(present, values, 0.0), onehot @ present.astype(float)
    return (sums[:, 0], sizes[:, 0]) if flat else (sums, sizes)


def ratio_or_nan(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den (a prompt count) is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def clustered_means(counts: np.ndarray, sums: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(point means [K], resampled means [R, K]) from per-fact sums and prompt counts [F, K].
    A resample that draws no prompt of a column gives NaN for it."""
    point = ratio_or_nan(sums.sum(0), sizes.sum(0))
    return point, ratio_or_nan(counts @ sums, counts @ sizes)


def clustered_median(counts: np.ndarray, index: np.ndarray, values: np.ndarray) -> tuple[float, np.ndarray]:
    """(median, resampled medians [R]) of per-prompt `values` (NaN = absent) when every prompt
    of a fact is repeated as often as its fact is drawn; the same rule as `np.median` on the
    expanded sample (mean of the two middle values when the count is even)."""
    keep = ~np.isnan(values)
    values, index = values[keep], index[keep]
    if len(values) == 0:
        return float("nan"), np.full(len(counts), np.nan)
    # Cumulative prompt count at each distinct value, per resample: [R, F] @ [F, U]. Ranks
    # repeat a lot, so U (distinct values) is much smaller than the prompt count.
    distinct, which = np.unique(values, return_inverse=True)
    n_facts, n_distinct = counts.shape[1], len(distinct)
    at_value = np.bincount(index * n_distinct + which.ravel(), minlength=n_facts * n_distinct).reshape(
        n_facts, n_distinct
    )
    cum = counts @ np.cumsum(at_value, axis=1)  # [R, U]
    total = cum[:, -1]
    low = (cum > ((total - 1) // 2)[:, None]).argmax(1)
    high = (cum > (total // 2)[:, None]).argmax(1)
    medians = np.where(total > 0, (distinct[low] + distinct[high]) / 2, np.nan)
    return float(np.median(values)), medians


def percentile_interval(samples: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Percentile interval per column of [R, ...] resampled statistics (numpy's default linear
    interpolation); resamples where a statistic is undefined (NaN) are left out, and a column
    with none defined gives NaN."""
    samples = np.asarray(samples, dtype=float)
    shape = samples.shape[1:]
    low, high = np.full(shape, np.nan).ravel(), np.full(shape, np.nan).ravel()
    if samples.shape[0] == 0:
        return low.reshape(shape), high.reshape(shape)
    flat = samples.reshape(samples.shape[0], -1)
    valid = (~np.isnan(flat)).sum(0)
    complete = valid == flat.shape[0]
    tails = [50 * (1 - level), 50 * (1 + level)]
    if complete.any():  # the common case: numpy's partition-based percentile
        low[complete], high[complete] = np.percentile(flat[:, complete], tails, axis=0)
    partial = (valid > 0) & ~complete
    if partial.any():  # sort (NaN last) and interpolate within each column's defined part
        ordered, count = np.sort(flat[:, partial], axis=0), valid[partial]
        for bound, q in ((low, tails[0]), (high, tails[1])):
            position = q / 100 * (count - 1)
            below = np.floor(position).astype(int)
            above = np.minimum(below + 1, count - 1)
            a = np.take_along_axis(ordered, below[None], 0)[0]
            b = np.take_along_axis(ordered, above[None], 0)[0]
            bound[partial] = np.where(a == b, a, a + (b - a) * (position - below))
    return low.reshape(shape), high.reshape(shape)


def interval_of(samples: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """`percentile_interval` of one statistic's resamples [R], as two floats."""
    low, high = percentile_interval(np.asarray(samples, dtype=float)[:, None], level)
    return float(low[0]), float(high[0])


# --- recovery ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    """The share of the gap from `base` to `full` that a condition covers, with its interval.
    `defined` is False when the gap's own interval contains zero (the finetuned model is not
    distinguishable from the base, so there is no gain to share out); value and bounds are
    then NaN and `reason` says why."""

    value: float
    low: float
    high: float
    gap: float
    gap_low: float
    gap_high: float
    defined: bool
    reason: str = ""


@dataclass(frozen=True)
class Recoveries:
    """`Recovery`'s fields as arrays of one shape, for many conditions at once (NaN where a
    recovery is not defined)."""

    value: np.ndarray
    low: np.ndarray
    high: np.ndarray
    gap: np.ndarray
    gap_low: np.ndarray
    gap_high: np.ndarray
    defined: np.ndarray


def recovery_many(cond, base, full, cond_samples, base_samples, full_samples, level: float = 0.95) -> Recoveries:
    """`recovery` for arrays at once: points broadcast together, samples likewise with the
    resamples first."""
    cond, base, full = (np.asarray(x, dtype=float) for x in (cond, base, full))
    gap = full - base
    gap_samples = np.asarray(full_samples, dtype=float) - np.asarray(base_samples, dtype=float)
    gap_low, gap_high = percentile_interval(gap_samples, level)
    defined = (
        np.isfinite(gap) & np.isfinite(cond) & (gap != 0) & ~np.isnan(gap_low) & ~((gap_low <= 0) & (gap_high >= 0))
    )
    cond_samples = np.asarray(cond_samples, dtype=float)
    ratio_samples = _ratio_signed(cond_samples - np.asarray(base_samples, dtype=float), gap_samples)
    low, high = percentile_interval(ratio_samples, level)
    value = _ratio_signed(cond - base, gap)
    shape = np.broadcast(cond, gap).shape
    nan = np.full(shape, np.nan)
    defined = np.broadcast_to(defined, shape)
    # (+ 0.0 turns a -0.0, e.g. the base's own recovery over a negative gap, into 0.0)
    return Recoveries(
        value=np.where(defined, value, nan) + 0.0,
        low=np.where(defined, low, nan) + 0.0,
        high=np.where(defined, high, nan) + 0.0,
        gap=np.broadcast_to(gap, shape),
        gap_low=np.broadcast_to(gap_low, shape),
        gap_high=np.broadcast_to(gap_high, shape),
        defined=defined,
    )


def recovery(
    cond: float,
    base: float,
    full: float,
    cond_samples: np.ndarray,
    base_samples: np.ndarray,
    full_samples: np.ndarray,
    level: float = 0.95,
) -> Recovery:
    """(C - base) / (full - base) with a percentile interval over the shared resamples."""
    r = recovery_many(cond, base, full, cond_samples, base_samples, full_samples, level)
    gap, gap_low, gap_high = float(r.gap), float(r.gap_low), float(r.gap_high)
    if bool(r.defined):
        return Recovery(float(r.value), float(r.low), float(r.high), gap, gap_low, gap_high, True)
    nan = float("nan")
    if not (np.isfinite(gap) and np.isfinite(cond)):
        return Recovery(nan, nan, nan, gap, gap_low, gap_high, False, "a value is missing")
    return Recovery(
        nan,
        nan,
        nan,
        gap,
        gap_low,
        gap_high,
        False,
        f"undefined: full - base = {gap:.3g} [{gap_low:.3g}, {gap_high:.3g}] includes 0",
    )


def _ratio_signed(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den != 0, num / np.where(den != 0, den, 1.0), np.nan)


# --- paired tests -----------------------------------------------------------------------------


@dataclass(frozen=True)
class PairedTest:
    """A - B over the prompts both cover: mean difference with its bootstrap interval, the
    two-sided sign-flip permutation p-value over facts, and the standardized effect d_z (mean of
    the per-fact mean differences over their standard deviation)."""

    difference: float
    low: float
    high: float
    p_value: float
    effect_size: float
    n_facts: int
    n_prompts: int
    permutations: int
    exact: bool


def sign_flip_p_value(diff_sums: np.ndarray, permutations: int, seed) -> tuple[float, int, bool]:
    """Two-sided p-value that per-fact summed differences are centred on zero: under the null,
    A and B are exchangeable within a fact, so each fact's difference keeps or flips its sign.
    Exact (every sign pattern) when 2**F <= permutations, else Monte Carlo with the observed
    pattern counted in, (1 + hits) / (1 + permutations). Returns (p, patterns used, exact)."""
    d = np.asarray(diff_sums, dtype=float)
    d = d[d != 0]  # a zero difference is the same under either sign
    if len(d) == 0:
        return 1.0, 0, True
    observed = abs(d.sum())
    tolerance = 1e-9 * max(1.0, np.abs(d).sum())
    if 2 ** len(d) <= max(permutations, 1):
        bits = (np.arange(2 ** len(d))[:, None] >> np.arange(len(d))) & 1
        totals = np.abs((1 - 2 * bits) @ d)
        return float((totals >= observed - tolerance).mean()), len(totals), True
    signs = np.random.default_rng(seed).integers(0, 2, size=(permutations, len(d))) * 2 - 1
    hits = int((np.abs(signs @ d) >= observed - tolerance).sum())
    return (1 + hits) / (1 + permutations), permutations, False


def standardized_effect(per_fact: np.ndarray) -> float:
    """d_z: mean over standard deviation of per-fact mean differences (NaN under two facts;
    +-inf when every fact differs by the same nonzero amount)."""
    if len(per_fact) < 2:
        return float("nan")
    mean, spread = float(per_fact.mean()), float(per_fact.std(ddof=1))
    if spread > 0:
        return mean / spread
    return float(np.sign(mean) * np.inf) if mean != 0 else 0.0


def paired_test(
    counts: np.ndarray,
    index: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    n_facts: int,
    permutations: int = PERMUTATIONS,
    seed=0,
    level: float = 0.95,
) -> PairedTest:
    """Compare per-prompt values `a` and `b` (aligned, NaN = not covered) of two conditions of one
    experiment, over the prompts both cover, resampling facts with `counts` [R, n_facts]."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    diff = np.where(np.isnan(a) | np.isnan(b), np.nan, a - b)
    sums, sizes = fact_sums(index, diff, n_facts)
    point, samples = clustered_means(counts, sums[:, None], sizes[:, None])
    low, high = interval_of(samples[:, 0], level)
    used = sizes > 0
    p, patterns, exact = sign_flip_p_value(sums[used], permutations, seed)
    per_fact = sums[used] / sizes[used]
    effect = standardized_effect(per_fact)
    return PairedTest(float(point[0]), low, high, p, effect, int(used.sum()), int(sizes.sum()), patterns, exact)
