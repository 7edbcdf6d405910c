"""Per-example scores from teacher-forced logits, and the values a summary metric averages.

A row is a prompt followed by its target's tokens except the last; the logits at the prompt's
last token score the target's first token (the paper's measures; where the target's first tokens
are whitespace alone, the logits after them score its first token that carries content, the
scored token of `data.encode`, with those tokens teacher-forced), and the logits from there on
score the whole target (log-probability, and greedy exact match: greedy decoding reproduces the
target exactly when every teacher-forced argmax is the target token, because each step then sees
the same prefix as greedy decoding would).
"""

from __future__ import annotations

import numpy as np
import torch


def score_rows(
    logits: torch.Tensor, first_steps: list[int], targets: list[list[int]], scored: list[int] | None = None
) -> list[dict]:
    """Scores for each row of `logits` [rows, seq, vocab], or of a list of per-row [seq, vocab]
    tensors; `first_steps[row]` indexes the logits that score the row's first target token (the
    prompt's last token: its length - 1 in a right-padded row); `scored[row]` (default 0) the
    target token that rank, prob and predicted_id score (`Example.scored`).

    rank: 1 + the number of vocabulary entries with a strictly larger logit than the scored
    target token (ties count in the target's favour); prob: its softmax probability;
    target_logprob: sum of log-probabilities of all target tokens; exact_match: greedy decoding
    yields exactly the target tokens; predicted_id: the argmax where the scored token is scored."""
    # Gather every scored step of every row into one [steps, vocab] block: a few large tensor
    # operations instead of several small ones per row.
    if not torch.is_tensor(logits):  # one [seq, vocab] tensor per row (rows of varied width)
        steps = torch.cat([row[n : n + len(t)] for row, n, t in zip(logits, first_steps, targets)]).float()
        device = steps.device
    else:
        device = logits.device
        row_of = [r for r, t in enumerate(targets) for _ in t]
        pos_of = [first_steps[r] + j for r, t in enumerate(targets) for j in range(len(t))]
        steps = logits[torch.tensor(row_of, device=device), torch.tensor(pos_of, device=device)].float()
    row_of = [r for r, t in enumerate(targets) for _ in t]
    tokens = torch.tensor([tok for t in targets for tok in t], device=device)
    logp = torch.log_softmax(steps, dim=-1)
    token_logp = logp.gather(1, tokens[:, None])[:, 0]
    correct = steps.argmax(-1) == tokens
    firsts = torch.tensor([0] + [len(t) for t in targets[:-1]], device=device).cumsum(0)
    if scored is not None and any(scored):
        firsts = firsts + torch.tensor(scored, device=device)
    first_logits = steps[firsts]
    first_target = first_logits.gather(1, tokens[firsts][:, None])
    ranks = (first_logits > first_target).sum(-1) + 1
    rows = torch.tensor(row_of, device=device)
    total_logp = torch.zeros(len(targets), device=device).index_add_(0, rows, token_logp)
    wrong = torch.zeros(len(targets), device=device).index_add_(0, rows, (~correct).float())
    ranks, probs = ranks.tolist(), token_logp[firsts].exp().tolist()
    total_logp, wrong = total_logp.tolist(), wrong.tolist()
    predicted = first_logits.argmax(-1).tolist()
    return [
        {
            "rank": int(ranks[i]),
            "prob": float(probs[i]),
            "target_logprob": float(total_logp[i]),
            "exact_match": wrong[i] == 0,
            "predicted_id": int(predicted[i]),
        }
        for i in range(len(targets))
    ]


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
