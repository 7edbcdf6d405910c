"""Minimal graft search: the smallest set of (role, layer, component) groups that carries the
finetuning effect.

1. Attribute every cell of every prompt (`attribute`), sum each prompt's cells over the positions
   of each role (FE, M, R, LT, other), and average over prompts: one score per group.
2. Graft the top-1, top-2, ... groups exactly with the engine, and stop at the smallest set whose
   recovery of the SFT gain, (set - PRE) / (SFT - PRE), reaches the target on top-5 accuracy and on
   the target's probability (both at the prompt's last token, as in the paper). Sizes 1..16 are
   tried one by one, then sizes growing by a quarter up to every group (which is the donor
   everywhere: recovery 1); the first passing size is refined one by one from the last failing.
   At `grain="head"` (or `"neuron"`) the heads of q, k, v, o (the neurons of gate, up, down) are
   groups of their own, labelled `o#3` (component#unit), in place of their components.
3. For comparison: the same nested sizes in a seeded random order, and the paper's FE+LT
   (every layer and component at the first entity and the last token).
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl
import torch

from weightgraft.atomic import write_text_atomic
from weightgraft.attribution import attribution_plots
from weightgraft.attribution.attribute import GRAINS, Attribution, attribute
from weightgraft.attribution.cells import donor_name
from weightgraft.attribution.groups import Group, parse_label, rank_groups
from weightgraft.attribution.role_examples import RoleExample
from weightgraft.data.batching import right_pad
from weightgraft.engine.graft import Graft
from weightgraft.engine.grafter import Grafter
from weightgraft.errors import UserError
from weightgraft.experiments.vocabulary import DECISION_METRICS
from weightgraft.reporting import statistics as st
from weightgraft.reporting.localize_results import LOCALIZE_FILE, ChosenGroup, GraftCounts, LocalizeSummary


class NoGainError(UserError, ValueError):
    """The donor is no better than the recipient on the prompts (the models swapped, say): there
    is no gain whose share a graft could recover."""


@dataclass
class LocalizeResult:
    """What `localize` found; `save` writes it with its pictures."""

    method: str
    target: float
    groups: list[Group]  # every group, best-scored first
    scores: list[float]  # their mean attribution per prompt
    chosen: list[Group]  # the minimal set (empty when not reached)
    reached: bool
    curve: list[dict]  # one entry per evaluated size k: recovery for attribution and random order
    baselines: dict  # PRE, SFT and FE+LT: top5 and prob
    counts: dict  # groups and cells of the chosen set vs FE+LT-all
    attributions: list[Attribution]  # per batch, in example order
    examples: list[RoleExample]
    seconds: dict = field(default_factory=dict)
    agreement: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    intervals: dict = field(default_factory=dict)  # name -> metric -> value, low, high (fact-clustered)
    stop_on: tuple[str, ...] = DECISION_METRICS  # the metrics whose recovery must reach the target

    def ranking_table(self):
        return pl.DataFrame(
            {
                "rank": list(range(1, len(self.groups) + 1)),
                "role": [g[0] for g in self.groups],
                "layer": [g[1] for g in self.groups],
                "component": [g[2] for g in self.groups],
                "score": self.scores,
                "chosen": [i < len(self.chosen) for i in range(len(self.groups))],
            },
            schema_overrides={"layer": pl.Int64},
        )

    def cell_table(self):
        """Every example's every cell: example_id, position, token, role, layer, component, effect."""
        frames, start = [], 0
        for attr in self.attributions:
            rows = self.examples[start : start + len(attr.lengths)]
            start += len(rows)
            frames.append(
                attr.table(roles=[e.roles for e in rows], tokens=[e.tokens for e in rows], row_ids=[e.id for e in rows])
            )
        return pl.concat(frames).drop("row")

    def summary(self) -> LocalizeSummary:
        """What localize.json holds (its schema is shared with the report that reads it)."""
        chosen_k = len(self.chosen)
        at_k = next((c for c in self.curve if c["k"] == chosen_k), None)
        return LocalizeSummary(
            method=self.method,
            target_recovery=self.target,
            stop_on=list(self.stop_on),
            reached=self.reached,
            chosen=[ChosenGroup(role=r, layer=layer, component=c) for r, layer, c in self.chosen],
            recovery={m: at_k[f"recovery_{m}"] for m in DECISION_METRICS} if at_k else None,
            random_recovery_same_size={m: at_k[f"random_recovery_{m}"] for m in DECISION_METRICS} if at_k else None,
            baselines=self.baselines,
            counts=GraftCounts(**self.counts),
            examples=len(self.examples),
            intervals=self.intervals,
            seconds=self.seconds,
            agreement=self.agreement,
            notes=self.notes,
        )

    def save(self, folder) -> dict[str, str]:
        """localize.json, ranking/curve/cells parquet, and the pictures; returns name -> path."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        written = {
            "summary": folder / LOCALIZE_FILE,
            "ranking": folder / "ranking.parquet",
            "curve": folder / "curve.parquet",
            "cells": folder / "cells.parquet",
        }
        write_text_atomic(written["summary"], self.summary().to_json())
        self.ranking_table().write_parquet(written["ranking"])
        pl.DataFrame(self.curve).write_parquet(written["curve"])
        cells = self.cell_table()
        cells.write_parquet(written["cells"])
        written["heatmaps"] = attribution_plots.role_heatmaps(self.ranking_table(), folder / "heatmaps.png")
        written["recovery"] = attribution_plots.recovery_curve(self, folder / "recovery.png")
        written["positions"] = attribution_plots.position_heatmaps(cells, self.examples[0].id, folder / "positions.png")
        written["tokens"] = attribution_plots.token_view(cells, self.examples, set(self.chosen), folder / "tokens.html")
        return {k: str(v) for k, v in written.items()}


def localize(
    grafter: Grafter,
    examples: Sequence[RoleExample],
    method: str = "gradient",
    steps: int = 16,
    target: float = 0.9,
    batch_size: int = 16,
    sizes_per_pass: int = 8,
    dense_sizes: int = 16,
    max_groups: int | None = None,
    seed: int = 0,
    progress: bool = False,
    donor: str | None = None,
    stop_on: Sequence[str] = DECISION_METRICS,
    grain: str = "component",
) -> LocalizeResult:
    """Rank (role, layer, component) groups by attribution and find the smallest top-k set whose
    exact graft recovers `target` of the SFT gain on top-5 and on probability. With several
    donors, `donor` names the one to localize (SFT is that donor everywhere). `grain="head"` or
    `"neuron"` searches over single heads or neurons (groups `(role, layer, "o#3")`).

    Args:
        grafter: the `Grafter` of the recipient and the donor(s).
        examples: the prompts (`RoleExample`, e.g. from `encode_role_examples`).
        method: the attribution's method, "gradient" or "integrated".
        steps: the integrated attribution's points.
        target: the share of the SFT gain a set must recover (0..1].
        batch_size: examples per pass.
        sizes_per_pass: candidate set sizes evaluated in one pass.
        dense_sizes: sizes 1..dense_sizes are tried one by one, then each a quarter larger.
        max_groups: rank only the top groups (None: all).
        seed: the random control sets' seed.
        progress: print progress.
        donor: with several donors, the one to localize.
        stop_on: the metrics whose recovery must reach `target` (of top5, prob).
        grain: "component", "head" or "neuron".

    Returns:
        A `LocalizeResult`: the ranked groups, the chosen set, its recovery curve and controls.

    Raises:
        ValueError: bad settings (target, stop_on, grain) or no examples.
    """
    stop_on = _checked_stop_on(examples, target, stop_on, grain)
    examples = list(examples)
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    name = donor_name(grafter, donor)
    attributions, groups, scores = _ranked(grafter, examples, method, steps, donor, grain, batch_size, max_groups)
    seconds["attribute"] = time.perf_counter() - start

    start = time.perf_counter()
    per_example, baselines, gains = _baselines(grafter, examples, name, batch_size)
    notes = []
    chosen_k, curve, values = _search(
        grafter,
        examples,
        groups,
        name,
        baselines["PRE"],
        gains,
        seed=seed,
        target=target,
        stop_on=stop_on,
        batch_size=batch_size,
        sizes_per_pass=sizes_per_pass,
        dense_sizes=dense_sizes,
        progress=progress,
    )
    curve = [curve[k] for k in sorted(curve)]
    if chosen_k is not None:
        per_example["chosen"], per_example["random"] = values[chosen_k]
    seconds["search"] = time.perf_counter() - start
    reached = chosen_k is not None
    chosen = groups[:chosen_k] if reached else []
    if not reached:
        notes.append(
            f"no top-k set of the {len(groups)} groups reached {target:.0%} recovery on {' and '.join(stop_on)}"
        )
    intervals, note = recovery_intervals(examples, per_example, seed)
    notes.append(note)
    counts = _counts(grafter, examples, chosen)
    return LocalizeResult(
        method,
        target,
        groups,
        scores,
        chosen,
        reached,
        curve,
        baselines,
        counts,
        attributions,
        examples,
        seconds,
        notes=notes,
        intervals=intervals,
        stop_on=stop_on,
    )


# --- internals --------------------------------------------------------------------------------
def _ranked(
    grafter,
    examples: list[RoleExample],
    method: str,
    steps: int,
    donor: str | None,
    grain: str,
    batch_size: int,
    max_groups: int | None,
) -> tuple[list[Attribution], list, list]:
    """Step 1 of the search: every prompt attributed (a batch at a time), and the groups ranked by
    their mean score, the top `max_groups` kept (all: None). Returns (attributions, groups, scores)."""
    attributions = [
        _attribute_batch(grafter, examples[i : i + batch_size], method, steps, donor, grain)
        for i in range(0, len(examples), batch_size)
    ]
    groups, scores = rank_groups(attributions, examples)
    if max_groups is not None:
        groups, scores = groups[:max_groups], scores[:max_groups]
    return attributions, groups, scores


def _checked_stop_on(examples: Sequence[RoleExample], target: float, stop_on: Sequence[str], grain: str) -> tuple:
    """`stop_on` as a tuple, after refusing arguments the search cannot run with."""
    if grain not in GRAINS:
        raise ValueError(f"grain must be one of {list(GRAINS)}, not {grain!r}")
    if not examples:
        raise ValueError("localize needs at least one example")
    if not 0 < target <= 1:
        raise ValueError(f"target recovery must be in (0, 1], got {target}")
    stop_on = tuple(stop_on)
    if not stop_on or any(m not in DECISION_METRICS for m in stop_on):
        raise ValueError(f"stop_on must name one or more of {list(DECISION_METRICS)}, not {list(stop_on)}")
    return stop_on


def _baselines(grafter, examples: list[RoleExample], name: str, batch_size: int) -> tuple[dict, dict, dict]:
    """PRE, SFT and FE+LT on the examples: (their per-example values, their means with FE+LT's
    recovery, the gain SFT - PRE per decision metric); refused when the donor gains nothing."""
    everything = [[Graft(donor=name)] for _ in examples]
    fe_lt = [[Graft(e.roles.get("FE", []) + e.roles.get("LT", []), donor=name)] for e in examples]
    (pre, sft, felt) = _evaluate(grafter, examples, [[[] for _ in examples], everything, fe_lt], batch_size)
    per_example = {"PRE": pre.pop("per_example"), "SFT": sft.pop("per_example"), "FE+LT": felt.pop("per_example")}
    baselines = {"PRE": pre, "SFT": sft, "FE+LT": felt}
    gains = {m: sft[m] - pre[m] for m in DECISION_METRICS}
    for m, gain in gains.items():
        if gain <= 0:
            raise NoGainError(
                f"the donor does not improve on the recipient in {m} (PRE {pre[m]:.3f}, SFT {sft[m]:.3f}) "
                "on these prompts: there is no gain to localize; give the pretrained model as recipient and "
                "its finetune as donor (not swapped), with the dataset the finetune learned"
            )
    baselines["FE+LT"].update({f"recovery_{m}": (felt[m] - pre[m]) / gains[m] for m in DECISION_METRICS})
    return per_example, baselines, gains


def _search(
    grafter,
    examples: list[RoleExample],
    groups: list,
    name: str,
    pre: dict,
    gains: dict,
    *,
    seed: int,
    target: float,
    stop_on: tuple,
    batch_size: int,
    sizes_per_pass: int,
    dense_sizes: int,
    progress: bool,
) -> tuple[int | None, dict[int, dict], dict[int, tuple[dict, dict]]]:
    """The smallest top-k set reaching `target` on every `stop_on` metric (None: none did), with
    each measured size's curve entry and its per-example values (top-k and random-k alike)."""
    shuffled = list(groups)
    random.Random(seed).shuffle(shuffled)
    curve: dict[int, dict] = {}
    values: dict[int, tuple[dict, dict]] = {}  # per-example values of each size, for intervals

    def measure(sizes: list[int]) -> int | None:
        """Graft the top-k (and random-k) sets of these sizes; the first size reaching the target."""
        for i in range(0, len(sizes), sizes_per_pass):
            part = sizes[i : i + sizes_per_pass]
            sets = [[_grafts_for(e, groups[:k], name) for e in examples] for k in part]
            sets += [[_grafts_for(e, shuffled[:k], name) for e in examples] for k in part]
            results = _evaluate(grafter, examples, sets, batch_size)
            for j, k in enumerate(part):
                ours, rand = results[j], results[len(part) + j]
                values[k] = (ours.pop("per_example"), rand.pop("per_example"))
                entry = {
                    "k": k,
                    **{m: ours[m] for m in DECISION_METRICS},
                    **{f"random_{m}": rand[m] for m in DECISION_METRICS},
                }
                entry.update({f"recovery_{m}": (ours[m] - pre[m]) / gains[m] for m in DECISION_METRICS})
                entry.update({f"random_recovery_{m}": (rand[m] - pre[m]) / gains[m] for m in DECISION_METRICS})
                curve[k] = entry
            if progress:
                last = curve[part[-1]]
                print(
                    f"localize: sizes {part[0]}-{part[-1]} of {len(groups)}: recovery top5 "
                    f"{last['recovery_top5']:.2f}, prob {last['recovery_prob']:.2f}",
                    flush=True,
                )
            passing = [k for k in part if all(curve[k][f"recovery_{m}"] >= target for m in stop_on)]
            if passing:
                return passing[0]
        return None

    # Sizes 1..dense_sizes one by one, then growing by a quarter up to every group; the first
    # passing size is then refined one by one from the last size that did not pass.
    schedule = _size_schedule(len(groups), dense_sizes)
    chosen_k = measure(schedule)
    if chosen_k is not None:
        below = max([k for k in curve if k < chosen_k], default=0)
        if chosen_k - below > 1:
            chosen_k = measure(list(range(below + 1, chosen_k))) or chosen_k
    return chosen_k, curve, values


def _size_schedule(count: int, dense: int) -> list[int]:
    """1..dense, then each size a quarter above the previous, ending at `count` (every group)."""
    sizes = list(range(1, min(dense, count) + 1))
    while sizes[-1] < count:
        sizes.append(min(count, max(sizes[-1] + 1, round(sizes[-1] * 1.25))))
    return sizes


def _attribute_batch(
    grafter, batch: list[RoleExample], method: str, steps: int, donor: str | None, grain: str = "component"
) -> Attribution:
    ids, mask = right_pad([e.input_ids for e in batch], pad_id=0)
    return attribute(
        grafter,
        ids,
        [e.target_id for e in batch],
        attention_mask=mask,
        method=method,
        steps=steps,
        donor=donor,
        grain=grain,
    )


def _grafts_for(example: RoleExample, groups: Sequence[Group], donor: str | None = None) -> list[Graft]:
    """One Graft per (role, component) of the set, over that component's chosen layers; heads
    and neurons: one Graft per (role, component, layer), over its chosen units."""
    layers: dict[tuple[str, str], list[int]] = {}
    units: dict[tuple[str, str, int], list[int]] = {}
    for role, layer, label in groups:
        if not example.roles.get(role):
            continue
        comp, unit = parse_label(label)
        if unit is None:
            layers.setdefault((role, comp), []).append(0 if layer is None else layer)
        else:
            units.setdefault((role, comp, layer), []).append(unit)
    grafts = [
        Graft(positions=example.roles[role], layers=sorted(set(ls)), components=[comp], donor=donor)
        for (role, comp), ls in layers.items()
    ]
    for (role, comp, layer), chosen in units.items():
        kind = "heads" if comp in GRAINS["head"] else "experts" if comp in GRAINS["expert"] else "neurons"
        grafts.append(Graft(example.roles[role], [layer], comp, donor=donor, **{kind: sorted(chosen)}))
    return grafts


def _evaluate(grafter, examples: list[RoleExample], sets: list[list[list[Graft]]], batch_size: int) -> list[dict]:
    """Exact top-5 accuracy and mean probability of the first target token, per set of grafts
    (each set: one graft list per example), with the per-example values under `per_example`.
    Rows of one prompt are adjacent, so the engine shares their common prefix."""
    rows = [(s, e) for e in range(len(examples)) for s in range(len(sets))]
    ranks = np.zeros((len(sets), len(examples)))
    probs = np.zeros((len(sets), len(examples)))
    per_pass = max(1, batch_size * 16)
    for start in range(0, len(rows), per_pass):
        chunk = rows[start : start + per_pass]
        ids, mask = right_pad([examples[e].input_ids for _, e in chunk], pad_id=0)
        grafts = [sets[s][e] or None for s, e in chunk]
        logits = grafter.last_logits(ids, row_grafts=grafts, attention_mask=mask).float()
        target = torch.tensor([examples[e].target_id for _, e in chunk], device=logits.device)
        chosen = logits.gather(1, target[:, None])
        rank = ((logits > chosen).sum(-1) + 1).cpu().numpy()
        prob = torch.softmax(logits, -1).gather(1, target[:, None])[:, 0].cpu().numpy()
        for (s, e), r, p in zip(chunk, rank, prob):
            ranks[s, e], probs[s, e] = r, p
    return [
        {
            "top5": float((ranks[s] <= 5).mean()),
            "prob": float(probs[s].mean()),
            "per_example": {"top5": (ranks[s] <= 5).astype(float), "prob": probs[s]},
        }
        for s in range(len(sets))
    ]


def _counts(grafter, examples: list[RoleExample], chosen: list[Group]) -> dict:
    """The chosen set against FE+LT-all, in groups and in cells (position x layer x component)."""
    adapter = grafter.adapter
    per_position = grafter.num_layers * len(adapter.per_layer) + len(adapter.model_level)
    fe_lt_groups = 2 * per_position
    chosen_cells = [sum(len(e.roles.get(role, [])) for role, _, _ in chosen) for e in examples]
    fe_lt_cells = [per_position * (len(e.roles.get("FE", [])) + len(e.roles.get("LT", []))) for e in examples]
    return {
        "chosen_groups": len(chosen),
        "fe_lt_groups": fe_lt_groups,
        "chosen_cells_per_prompt": float(np.mean(chosen_cells)),
        "fe_lt_cells_per_prompt": float(np.mean(fe_lt_cells)),
        "all_cells_per_prompt": float(np.mean([per_position * len(e.input_ids) for e in examples])),
    }


def recovery_intervals(
    examples: list[RoleExample],
    per_example: dict,
    seed: int,
    resamples: int = 2000,
) -> tuple[dict, str]:
    """95% fact-clustered bootstrap intervals of the recovery of the chosen set, the random set of
    the same size and FE+LT (facts resampled with all their prompts; one resample set shared by
    PRE, SFT and each condition), by the run summary's own statistics."""
    _, index = st.fact_index([e.fact_id for e in examples])
    n_facts = int(index.max()) + 1
    counts = st.draw_fact_counts(n_facts, resamples, st.seed_for(seed, "localize"))
    names = [n for n in ("FE+LT", "chosen", "random") if n in per_example]
    out: dict = {}
    for metric in DECISION_METRICS:
        columns = np.stack([per_example[n][metric] for n in ["PRE", "SFT", *names]], axis=1)
        sums, sizes = st.fact_sums(index, columns, n_facts)
        point, samples = st.clustered_means(counts, sums, sizes)
        for j, name in enumerate(names, start=2):
            r = st.recovery(point[j], point[0], point[1], samples[:, j], samples[:, 0], samples[:, 1])
            out.setdefault(name, {})[metric] = {"value": r.value, "low": r.low, "high": r.high, "defined": r.defined}
    return out, (
        f"intervals: 95% fact-clustered bootstrap over {n_facts} facts, {resamples} resamples "
        "(weightgraft.reporting.statistics)"
    )
