"""The current graft over many dataset prompts, with the interval the reports use.

A graft drawn on one prompt names token positions; to ask the same question of other prompts its
positions are read as the role expression that selects them (FE, LT, (FE+LT)^C, ...: the run
config's language, `export.graft_roles`), and the layers, components and donors are kept.
Each prompt is scored as the runner scores it (top-5 of the target's first token that carries
content; where the tokenizer splits the name's first character over byte tokens, of that whole
character: every one of its tokens in the top 5 at its teacher-forced step, the runner's
`engine.scoring.score_rows`), for the recipient, each donor alone and the graft; accuracies get a bootstrap interval
that resamples facts (a fact's prompts move together), and each donor's gain recovered by the
graft the paper's recovery with its interval (`reporting.statistics`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch

from weightgraft.data.schema import EvalPrompt
from weightgraft.engine.graft import Graft
from weightgraft.experiments.conditions.position_roles import NotApplicable, parse_positions
from weightgraft.explore.lru import LRU
from weightgraft.reporting.statistics import (
    clustered_means,
    draw_fact_counts,
    fact_index,
    fact_sums,
    interval_of,
    recovery,
)

MAX_PROMPTS = 400  # prompts one request may score (a few seconds on a real model's CPU)
RESAMPLES = 1000
TOP_K = 5


@dataclass(frozen=True)
class RoleGraft:
    """A graft with its positions as a role expression, for any prompt of the dataset."""

    positions: str
    graft: Graft

    def on(self, role_positions: dict[str, list[int]], n: int, forced: int = 0) -> Graft:
        """The graft on a prompt of `n` tokens followed by `forced` teacher-forced target tokens,
        which take the prompt's last token's choice (as the runner's `row_grafts_of`)."""
        positions = list(parse_positions(self.positions).evaluate(role_positions, n))
        if forced and n - 1 in positions:
            positions += range(n, n + forced)
        g = self.graft
        return replace(g, positions=positions)


def chosen_prompts(prompts: Sequence[EvalPrompt], count: int, template: str | None, seed: int) -> list[EvalPrompt]:
    """`count` prompts (of one template, when given), drawn by `seed`, in the dataset's order."""
    pool = [p for p in prompts if template is None or p.template_id == template]
    picked = set(random.Random(seed).sample(range(len(pool)), min(count, len(pool))))
    return [p for i, p in enumerate(pool) if i in picked]


def _hits(logits: torch.Tensor, unit: list[int]) -> list[float]:
    """Per row of `logits` [rows, len(unit), vocab]: 1.0 where every token of the scored unit is
    in the top-5 at its step, else 0.0."""
    top = logits.float().topk(TOP_K, dim=-1).indices
    found = (top == torch.tensor(unit, device=top.device)[None, :, None]).any(-1).all(-1)
    return [float(hit) for hit in found]


def _interval(index: np.ndarray, values: np.ndarray, counts: np.ndarray) -> tuple[float, np.ndarray, float, float]:
    """Mean of per-prompt values, its resamples and percentile interval, facts resampled."""
    sums, sizes = fact_sums(index, values, counts.shape[1])
    point, samples = clustered_means(counts, sums[:, None], sizes[:, None])
    low, high = interval_of(samples[:, 0])
    return float(point[0]), samples[:, 0], low, high


def score_prompts(
    unit_logits: Callable[[list[int], list, int], torch.Tensor],
    encoded_prompts: Sequence[tuple[EvalPrompt, list[int], dict[str, list[int]], list[int]]],
    role_grafts: Sequence[RoleGraft],
    donors: Sequence[str],
    seed: int = 0,
    known: LRU | None = None,
) -> dict:
    """Top-5 hits of the recipient, each donor alone and the graft on each prompt, summarized.

    `encoded_prompts`: (prompt, scoring ids, role positions, the scored unit's token ids) each;
    `unit_logits(ids, rows, n)`: the last `n` positions' logits [rows, n, vocab] for each row's
    grafts (the unit's tokens but its last are teacher-forced after the prompt); `known`: the
    recipient's and donors' hits by prompt id, kept from earlier requests (the models do not
    change), so that a request runs only the graft's row of a prompt seen before."""
    names = ["recipient", *donors, "graft"]
    known = LRU(len(encoded_prompts)) if known is None else known
    everywhere = [[Graft("all", "all", "all", donor=d)] for d in donors]
    hits: list[list[float]] = []
    facts: list[str] = []
    skipped: dict[str, int] = {}
    for prompt, ids, roles, unit in encoded_prompts:
        forced = len(unit) - 1
        try:
            graft = [g.on(roles, len(ids), forced) for g in role_grafts]
        except NotApplicable as err:  # a prompt without a role the graft names
            skipped[str(err)] = skipped.get(str(err), 0) + 1
            continue
        base = known.get(("hits", prompt.id))
        rows = ([None, *everywhere] if base is None else []) + ([graft] if graft else [])
        row_hits = _hits(unit_logits(ids + unit[:-1], rows, len(unit)), unit) if rows else []
        if base is None:
            base = known.put(("hits", prompt.id), row_hits[: 1 + len(donors)])
        hits.append([*base, row_hits[-1] if graft else base[0]])  # nothing grafted: the recipient's
        facts.append(prompt.fact_id)
    if not hits:
        return {"prompts": 0, "skipped": skipped, "columns": []}
    values = np.asarray(hits)
    _, index = fact_index(facts)
    counts = draw_fact_counts(int(index.max()) + 1, RESAMPLES, seed)
    stats = [_interval(index, values[:, k], counts) for k in range(len(names))]
    columns = [{"name": n, "top5": s[0], "low": s[2], "high": s[3]} for n, s in zip(names, stats)]
    graft_point, graft_samples = stats[-1][0], stats[-1][1]
    base_point, base_samples = stats[0][0], stats[0][1]
    used = {g.graft.donor for g in role_grafts}  # recovery only of the gain of a donor the graft is from
    columns[-1]["recovery"] = {}
    for k, donor in ((k, d) for k, d in enumerate(donors, start=1) if d in used):
        r = recovery(graft_point, base_point, stats[k][0], graft_samples, base_samples, stats[k][1])
        columns[-1]["recovery"][donor] = {
            "value": None if not r.defined else r.value,
            "low": None if not r.defined else r.low,
            "high": None if not r.defined else r.high,
            "reason": r.reason,
        }
    return {
        "prompts": len(hits),
        "facts": int(index.max()) + 1,
        "skipped": skipped,
        "columns": columns,
        "interval": f"95% percentile bootstrap over facts ({RESAMPLES} resamples)",
    }
