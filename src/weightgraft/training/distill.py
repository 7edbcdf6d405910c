"""General text that teaches the pretrained model's own next-token distribution (`general_loss="kl"`).

Self-replay's texts are samples of the pretrained model; trained on with cross-entropy, each
position teaches one sampled token. Here a general row instead teaches the whole distribution the
pretrained (base) model gives at that position: the loss there is KL(base || model), whose
expected gradient is the sampled cross-entropy's, without its sampling noise. The new facts' rows
keep their cross-entropy. Both are summed over labelled positions and divided by the same count, so
that a batch's loss is normalized as the plain causal LM loss is (issue 40: a lever against
forgetting, measured in `docs/real_models.md`).
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from weightgraft.training.batches import labelled_logits


def distilled_loss(model, base, inputs: dict, num_items_in_batch=None):
    """Cross-entropy on the rows whose `general` flag is off, KL(base || model) on those where it
    is on, over positions with a label; divided by `num_items_in_batch` when Trainer counts it,
    else by the number of labelled positions. `base` is the frozen pretrained model.

    The facts' positions are unembedded first and the general ones after them, so that each loss
    reads a contiguous block of the logits: boolean masks over [positions, vocab] copied it and
    scattered its gradient back, which cost a SmolLM2 step about half again its plain time."""
    targets = inputs["labels"][:, 1:]
    labelled = targets != -100
    general = inputs["general"].bool()
    rows, columns = labelled.nonzero(as_tuple=True)
    is_general = general[rows]
    facts_first = torch.sort(is_general.to(torch.uint8), stable=True).indices
    rows, columns = rows[facts_first], columns[facts_first]
    n_general = int(is_general.sum())
    n_facts = len(rows) - n_general
    logits, outputs = labelled_logits(model, inputs, (rows, columns))
    fact_logits, general_logits = logits.float().split([n_facts, n_general])
    loss = F.cross_entropy(fact_logits, targets[rows, columns][:n_facts], reduction="sum")
    if n_general:
        teacher_inputs = {
            "input_ids": inputs["input_ids"][general],
            "attention_mask": inputs["attention_mask"][general],
        }
        with torch.no_grad():
            teacher, _ = labelled_logits(base, teacher_inputs, labelled[general])  # row-major, as the block
            teacher_log_p = F.log_softmax(teacher.float(), dim=-1)
        loss = loss + F.kl_div(F.log_softmax(general_logits, dim=-1), teacher_log_p, log_target=True, reduction="sum")
    count = num_items_in_batch if num_items_in_batch is not None else labelled.sum()
    return loss / count, outputs


def frozen_copy(net):
    """The base model for `distilled_loss`: a copy of `net` made before it trains (ties kept), in
    eval mode, with no gradients (it must stay the pretrained model while `net` moves)."""
    base = copy.deepcopy(net).eval()
    base.requires_grad_(False)
    return base
