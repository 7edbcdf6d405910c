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
import polars as pl

from weightgraft.experiments.metrics import example_metric
from weightgraft.experiments.vocabulary import SUMMARY_METRICS

ALL = "ALL"  # the group over every template, or every fact kind: the one definition for reporting/
MEDIAN_METRICS = ("rank_median",)


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


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den (a prompt count) is 0."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / den, np.nan)


def clustered_means(counts: np.ndarray, sums: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(point means [K], resampled means [R, K]) from per-fact sums and prompt counts [F, K].
    A resample that draws no prompt of a column gives NaN for it."""
    point = _ratio(sums.sum(0), sizes.sum(0))
    return point, _ratio(counts @ sums, counts @ sizes)


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


def recovery_many(
    cond, base, full, cond_samples, base_samples, full_samples, level: float = 0.95
) -> dict[str, np.ndarray]:
    """`recovery` for arrays at once: points broadcast together, samples likewise with the
    resamples first. Returns value, low, high, gap, gap_low, gap_high and defined arrays."""
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
    return {
        "value": np.where(defined, value, nan) + 0.0,
        "low": np.where(defined, low, nan) + 0.0,
        "high": np.where(defined, high, nan) + 0.0,
        "gap": np.broadcast_to(gap, shape),
        "gap_low": np.broadcast_to(gap_low, shape),
        "gap_high": np.broadcast_to(gap_high, shape),
        "defined": defined,
    }


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
    gap, gap_low, gap_high = float(r["gap"]), float(r["gap_low"]), float(r["gap_high"])
    if bool(r["defined"]):
        return Recovery(float(r["value"]), float(r["low"]), float(r["high"]), gap, gap_low, gap_high, True)
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
    permutations: int = 10000,
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


# --- one experiment from its per-example frame ------------------------------------------------


@dataclass
class ExperimentStats:
    """Points [C, G, M] and shared resamples [R, C, G, M] of every condition x group x metric of
    one experiment, with prompt and fact counts [C, G]. A group is (template, fact kind): each
    template over every kind, `(ALL, ALL)` (the pooled value), and each kind over every template."""

    experiment: str
    conditions: list[str]
    groups: list[tuple[str, str]]
    metrics: list[str]
    points: np.ndarray
    samples: np.ndarray
    n_prompts: np.ndarray
    n_facts: np.ndarray
    counts: np.ndarray  # [R, F]
    facts: np.ndarray
    fact_of: dict  # example_id -> fact position
    values: dict  # condition -> (example ids, per-prompt metric values [N, M], templates [N])
    level: float = 0.95

    def where(self, condition: str, template: str = ALL, metric: str = "top5", kind: str = ALL) -> tuple:
        return (self.conditions.index(condition), self.groups.index((template, kind)), self.metrics.index(metric))

    def estimate(
        self, condition: str, template: str = ALL, metric: str = "top5", kind: str = ALL
    ) -> tuple[float, float, float]:
        c, g, m = self.where(condition, template, metric, kind)
        return (float(self.points[c, g, m]), *interval_of(self.samples[:, c, g, m], self.level))

    def recovery(
        self, condition: str, base: str, full: str, template: str = ALL, metric: str = "top5", kind: str = ALL
    ) -> Recovery:
        c, g, m = self.where(condition, template, metric, kind)
        b, f = self.conditions.index(base), self.conditions.index(full)
        return recovery(
            self.points[c, g, m],
            self.points[b, g, m],
            self.points[f, g, m],
            self.samples[:, c, g, m],
            self.samples[:, b, g, m],
            self.samples[:, f, g, m],
            self.level,
        )

    def paired(
        self, a: str, b: str, metric: str = "top5", template: str = ALL, permutations: int = 10000, seed=0
    ) -> PairedTest:
        ids_a, vals_a, tmpl_a = self.values[a]
        ids_b, vals_b, _ = self.values[b]
        m = self.metrics.index(metric)
        position = {e: i for i, e in enumerate(ids_b)}
        other = np.array([vals_b[position[e], m] if e in position else np.nan for e in ids_a])
        mine = vals_a[:, m].copy()
        if template != ALL:
            mine[tmpl_a != template] = np.nan
        index = np.array([self.fact_of[e] for e in ids_a], dtype=int)
        return paired_test(self.counts, index, mine, other, len(self.facts), permutations, seed, self.level)


def metric_columns(frame: pl.DataFrame, metrics) -> np.ndarray:
    """[N, M] per-prompt values of each summary metric (NaN where not applicable)."""
    cols = {k: frame[k].to_numpy() for k in ("rank", "prob", "target_logprob", "exact_match")}
    ok = frame["applicable"].to_numpy().astype(bool)
    cols = {k: np.where(ok, np.nan_to_num(np.asarray(v, dtype=float), nan=1.0), 1.0) for k, v in cols.items()}
    out = np.column_stack([example_metric(cols, m) for m in metrics]).astype(float)
    out[~ok] = np.nan
    return out


def summary_groups(templates: list[str], kinds: list[str]) -> list[tuple[str, str]]:
    """(template, fact kind) groups: each template, the pooled ALL, then each fact kind (kinds
    only when the records carry them: not a lone `unknown`)."""
    groups = [(t, ALL) for t in templates] + [(ALL, ALL)]
    if len(kinds) > 1 or (kinds and kinds != ["unknown"]):
        groups += [(ALL, k) for k in kinds]
    return groups


def experiment_stats(
    frame: pl.DataFrame,
    resamples: int,
    seed,
    *,
    name: str = "",
    templates: list[str] | None = None,
    metrics=SUMMARY_METRICS,
    level: float = 0.95,
) -> ExperimentStats:
    """Every condition x group x metric of one experiment with fact-clustered intervals from
    one shared resample set. `frame` has one row per (condition, example) with columns
    condition, example_id, fact_id, template, applicable, rank, prob, target_logprob,
    exact_match, and optionally fact_kind; not-applicable rows count for nothing."""
    metrics = list(metrics)
    conditions = list(dict.fromkeys(frame["condition"].to_list()))
    if templates is None:
        templates = sorted(set(frame["template"].to_list()))
    if "fact_kind" not in frame.columns:
        frame = frame.with_columns(fact_kind=pl.lit("unknown"))
    groups = summary_groups(list(templates), sorted(set(frame["fact_kind"].to_list())))
    facts, index = fact_index(frame["fact_id"].to_list())
    fact_of = dict(zip(frame["example_id"].to_list(), index.tolist()))
    counts = draw_fact_counts(len(facts), resamples, seed)
    mean_cols = [metrics.index(m) for m in metrics if m not in MEDIAN_METRICS]
    shape = (len(conditions), len(groups), len(metrics))
    points = np.full(shape, np.nan)
    samples = np.full((resamples, *shape), np.nan)
    n_prompts = np.zeros(shape[:2], dtype=int)
    n_facts = np.zeros(shape[:2], dtype=int)
    values = {}
    # Per-fact sums of every (condition, group, mean metric) and per-fact prompt counts of every
    # (condition, group): every metric of a prompt is present or absent together (applicable or
    # not), so the counts are shared by the metrics. Then one product for all resamples.
    blocks_sums, blocks_sizes = [], []
    parts = frame.partition_by("condition", as_dict=True, maintain_order=True)
    for c, cond in enumerate(conditions):
        part = parts[(cond,)]
        vals = metric_columns(part, metrics)
        values[cond] = (part["example_id"].to_list(), vals, np.asarray(part["template"].to_list(), dtype=object))
        idx = np.array([fact_of[e] for e in part["example_id"].to_list()], dtype=int)
        member = _members(part, vals, groups, mean_cols, f"experiment {name!r}, condition {cond!r}")
        onehot = np.zeros((len(facts), len(idx)))
        onehot[idx, np.arange(len(idx))] = 1.0
        masked = np.where(member[:, :, None], np.nan_to_num(vals[:, None, mean_cols]), 0.0)
        blocks_sums.append((onehot @ masked.reshape(len(idx), -1)).reshape(len(facts), len(groups), -1))
        blocks_sizes.append(onehot @ member.astype(float))  # [F, G]
        n_prompts[c] = member.sum(0)
        n_facts[c] = [len(set(idx[member[:, g]].tolist())) for g in range(len(groups))]
        for k in [metrics.index(m) for m in MEDIAN_METRICS if m in metrics]:
            for g in range(len(groups)):
                chosen = np.where(member[:, g], vals[:, k], np.nan)
                points[c, g, k], samples[:, c, g, k] = clustered_median(counts, idx, chosen)
    if conditions and mean_cols:
        points[:, :, mean_cols], samples[:, :, :, mean_cols] = _stacked_means(counts, blocks_sums, blocks_sizes)
    return ExperimentStats(
        name, conditions, groups, metrics, points, samples, n_prompts, n_facts, counts, facts, fact_of, values, level
    )


def _members(part: pl.DataFrame, vals: np.ndarray, groups: list[tuple[str, str]], mean_cols, where: str) -> np.ndarray:
    """[N, G]: whether each prompt of one condition counts in each (template, kind) group
    (applicable ones only); a scored prompt with a NaN mean metric is refused."""
    tmpl = np.asarray(part["template"].to_list(), dtype=object)
    kind = np.asarray(part["fact_kind"].to_list(), dtype=object)
    applicable = part["applicable"].to_numpy().astype(bool)
    if np.isnan(vals[applicable][:, mean_cols]).any():
        raise ValueError(f"{where}: a scored example has a NaN metric; rescore it (its logits were not finite)")
    return np.stack(
        [applicable & (tmpl == t if t != ALL else True) & (kind == k if k != ALL else True) for t, k in groups],
        axis=1,
    )


def _stacked_means(counts: np.ndarray, blocks_sums: list, blocks_sizes: list) -> tuple[np.ndarray, np.ndarray]:
    """(points [C, G, M'], resampled means [R, C, G, M']) from every condition's per-fact sums
    [F, G, M'] and prompt counts [F, G]: one matrix product for all resamples."""
    sums = np.stack(blocks_sums, axis=1)  # [F, C, G, M']
    sizes = np.stack(blocks_sizes, axis=1)  # [F, C, G]
    n_facts, resamples = sums.shape[0], counts.shape[0]
    totals = _ratio(sums.sum(0), sizes.sum(0)[..., None])
    drawn_sizes = counts @ sizes.reshape(n_facts, -1)  # [R, C*G]
    drawn = counts @ sums.reshape(n_facts, -1)  # [R, C*G*M']
    drawn = _ratio(
        drawn.reshape(resamples, *sums.shape[1:]), drawn_sizes.reshape(resamples, *sizes.shape[1:])[..., None]
    )
    return totals, drawn


def interval_rows(stats: ExperimentStats) -> list[dict]:
    """One row per condition x group x metric: value, interval, n prompts, n facts."""
    low, high = percentile_interval(stats.samples, stats.level)
    rows = []
    for c, cond in enumerate(stats.conditions):
        for g, (template, kind) in enumerate(stats.groups):
            for m, metric in enumerate(stats.metrics):
                rows.append(
                    {
                        "experiment": stats.experiment,
                        "condition": cond,
                        "template": template,
                        "fact_kind": kind,
                        "metric": metric,
                        "value": float(stats.points[c, g, m]),
                        "ci_low": float(low[c, g, m]),
                        "ci_high": float(high[c, g, m]),
                        "n": int(stats.n_prompts[c, g]),
                        "n_facts": int(stats.n_facts[c, g]),
                    }
                )
    return rows


RECOVERY_METRICS = ("top1", "top5", "prob", "target_logprob")


def recovery_rows(stats: ExperimentStats, base: str, full: str, metrics=RECOVERY_METRICS) -> list[dict]:
    """Recovery (C - base) / (full - base) of every condition, per group and metric: one
    vectorised pass over [resamples, conditions, groups, metrics]."""
    ms = [stats.metrics.index(m) for m in metrics if m in stats.metrics]
    if not ms:
        return []
    b, f = stats.conditions.index(base), stats.conditions.index(full)
    points, samples = stats.points[:, :, ms], stats.samples[:, :, :, ms]
    r = recovery_many(
        points, points[b], points[f], samples, samples[:, b][:, None], samples[:, f][:, None], stats.level
    )
    rows = []
    for g, (template, kind) in enumerate(stats.groups):
        for j, m in enumerate(ms):
            for c, cond in enumerate(stats.conditions):
                at = (c, g, j)
                rows.append(
                    {
                        "experiment": stats.experiment,
                        "condition": cond,
                        "template": template,
                        "fact_kind": kind,
                        "metric": stats.metrics[m],
                        "base": base,
                        "full": full,
                        "recovery": float(r["value"][at]),
                        "ci_low": float(r["low"][at]),
                        "ci_high": float(r["high"][at]),
                        "gap": float(r["gap"][at]),
                        "gap_low": float(r["gap_low"][at]),
                        "gap_high": float(r["gap_high"][at]),
                        "defined": bool(r["defined"][at]),
                        "n": int(stats.n_prompts[c, g]),
                        "n_facts": int(stats.n_facts[c, g]),
                    }
                )
    return rows
