"""One experiment's statistics from its per-example frame: every condition x group x metric on
the one resample set of facts that `reporting.statistics` draws (so differences and recoveries
are paired), and the rows of summary.csv and recovery.csv read from them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from weightgraft.experiments.metrics import example_metric
from weightgraft.experiments.vocabulary import SUMMARY_METRICS
from weightgraft.reporting.statistics import (
    ALL,
    PERMUTATIONS,
    PairedTest,
    Recovery,
    clustered_median,
    draw_fact_counts,
    fact_index,
    interval_of,
    paired_test,
    percentile_interval,
    ratio_or_nan,
    recovery,
    recovery_many,
)
from weightgraft.reporting.summary_rows import RecoveryRow, SummaryRow, defined

MEDIAN_METRICS = ("rank_median",)


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
        self, a: str, b: str, metric: str = "top5", template: str = ALL, permutations: int = PERMUTATIONS, seed=0
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
    totals = ratio_or_nan(sums.sum(0), sizes.sum(0)[..., None])
    drawn_sizes = counts @ sizes.reshape(n_facts, -1)  # [R, C*G]
    drawn = counts @ sums.reshape(n_facts, -1)  # [R, C*G*M']
    drawn = ratio_or_nan(
        drawn.reshape(resamples, *sums.shape[1:]), drawn_sizes.reshape(resamples, *sizes.shape[1:])[..., None]
    )
    return totals, drawn


def interval_rows(stats: ExperimentStats, fidelity: dict[str, str], wording: str) -> list[SummaryRow]:
    """One row per condition x group x metric: value, interval, n prompts, n facts; each
    condition's `fidelity` (from its record, "" where it has none) and the experiment's wording."""
    low, high = percentile_interval(stats.samples, stats.level)
    rows = []
    for c, cond in enumerate(stats.conditions):
        for g, (template, kind) in enumerate(stats.groups):
            for m, metric in enumerate(stats.metrics):
                rows.append(
                    SummaryRow(
                        experiment=stats.experiment,
                        condition=cond,
                        template=template,
                        fact_kind=kind,
                        metric=metric,
                        value=defined(float(stats.points[c, g, m])),
                        ci_low=defined(float(low[c, g, m])),
                        ci_high=defined(float(high[c, g, m])),
                        n=int(stats.n_prompts[c, g]),
                        n_facts=int(stats.n_facts[c, g]),
                        fidelity=fidelity.get(cond, ""),
                        wording=wording,
                    )
                )
    return rows


RECOVERY_METRICS = ("top1", "top5", "prob", "target_logprob")


def recovery_rows(stats: ExperimentStats, base: str, full: str, metrics=RECOVERY_METRICS) -> list[RecoveryRow]:
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
                    RecoveryRow(
                        experiment=stats.experiment,
                        condition=cond,
                        template=template,
                        fact_kind=kind,
                        metric=stats.metrics[m],
                        base=base,
                        full=full,
                        recovery=defined(float(r.value[at])),
                        ci_low=defined(float(r.low[at])),
                        ci_high=defined(float(r.high[at])),
                        gap=defined(float(r.gap[at])),
                        gap_low=defined(float(r.gap_low[at])),
                        gap_high=defined(float(r.gap_high[at])),
                        defined=bool(r.defined[at]),
                        n=int(stats.n_prompts[c, g]),
                        n_facts=int(stats.n_facts[c, g]),
                    )
                )
    return rows
