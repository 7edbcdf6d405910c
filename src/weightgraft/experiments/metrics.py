"""Per-example scores from teacher-forced logits, and the values a summary metric averages.

A row is a prompt followed by its target's tokens except the last; the logits at the prompt's
last token score the target's first token (the paper's measures; where the target's first tokens
are whitespace alone, the logits after them score its first token that carries content, the
scored token of `data.encode`, with those tokens teacher-forced; where the tokenizer splits the
name's first character over byte tokens, all of them: the scored unit, `score_rows`), and the
logits from there on score the whole target (log-probability, and greedy exact match: greedy decoding reproduces the
target exactly when every teacher-forced argmax is the target token, because each step then sees
the same prefix as greedy decoding would).
"""

from __future__ import annotations

import numpy as np

# The per-example scores are computed in the engine, so that `Grafter.score` and the runner
# share one implementation.
from weightgraft.engine.scoring import score_rows

__all__ = ["example_metric", "score_rows"]


def example_metric(rows: dict[str, np.ndarray], metric: str) -> np.ndarray:
    """The per-example values a summary metric averages (rank_median takes their median,
    rank_mean their mean: the paper's mean target rank)."""
    rank = rows["rank"].astype(float)
    if metric.startswith("top"):
        return (rank <= int(metric[3:])).astype(float)
    if metric in ("rank_median", "rank_mean"):
        return rank
    if metric == "mrr":
        return 1.0 / rank
    if metric == "exact_match":
        return rows["exact_match"].astype(float)
    return rows[metric].astype(float)
