"""Top-k accuracy of a causal LM on evaluation prompts.

A prompt counts as correct when the first token of its target is among the k most likely next
tokens after the prompt (the paper's measure). Datasets give every actor of a set a distinct first
name, so the first token picks out one answer. Where the target's first token is whitespace alone
(a name whose first character the tokenizer does not join to the leading space), its first token
that carries content is scored, after the whitespace token (`data.encode`: the scored token).
Where the tokenizer splits the name's first character over several byte tokens, the prompt counts
when every one of them is in the top k at its step, the earlier ones teacher-forced (the runner's
top-k on the scored unit, `engine.scoring.score_rows`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from weightgraft.data.batching import right_pad
from weightgraft.data.encode import encode_prompt
from weightgraft.data.schema import EvalPrompt


@torch.no_grad()
def topk_hits(model, tokenizer, prompts: Sequence[EvalPrompt], k: int = 5, batch_size: int = 64) -> list[bool]:
    """One bool per prompt: is the target's scored token (its first that is not whitespace alone)
    in the model's top k, and so is every later token of its scored unit, each at its step?"""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    encoded = [encode_prompt(tokenizer, p) for p in prompts]
    keeps = _keeps_logits(model)
    # Batches of prompts of like length: little padding, and few columns to unembed beyond those
    # a score reads (the vocabulary's matmul is a quarter of a SmolLM2 forward at every column).
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i].scoring_ids) + encoded[i].unit)
    hits = [False] * len(encoded)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        batch = [encoded[i] for i in rows]
        ids, mask = right_pad([e.scoring_ids + e.unit_ids[:-1] for e in batch], pad_id)
        low = min(len(e.scoring_ids) - 1 for e in batch) if keeps else 0
        keep = {"logits_to_keep": torch.arange(low, ids.shape[1], device=device)} if keeps else {}
        logits = model(input_ids=ids.to(device), attention_mask=mask.to(device), **keep).logits
        for row, (i, e) in enumerate(zip(rows, batch, strict=True)):
            first = len(e.scoring_ids) - 1 - low
            top = logits[row, first : first + e.unit].topk(k, dim=-1).indices.cpu()
            hits[i] = all(bool((top[j] == t).any()) for j, t in enumerate(e.unit_ids))
    model.train(was_training)
    return hits


def _keeps_logits(model) -> bool:
    """Does the model's forward take `logits_to_keep` as column indices (most causal LMs of
    transformers 5; a peft wrapper passes it on to the model it wraps)?"""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def topk_accuracy(model, tokenizer, prompts: Sequence[EvalPrompt], k: int = 5, batch_size: int = 64) -> float:
    if not prompts:
        raise ValueError("no prompts to evaluate")
    hits = topk_hits(model, tokenizer, prompts, k, batch_size)
    return sum(hits) / len(hits)
