"""The inputs of one `Grafter` call, checked before any work: integer token ids and a 0/1
attention mask of the same [batch, seq] shape, every row with a real token."""

from __future__ import annotations

import torch


def prepare_inputs(
    input_ids: torch.Tensor, attention_mask: torch.Tensor | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """`(ids, mask)` as long [batch, seq] tensors on `device` (a 1-d input is one row); a
    refusal naming the fix for anything the model would misread."""
    ids = torch.as_tensor(input_ids, device=device)
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise TypeError(
            f"input_ids must be integer token ids, got dtype {ids.dtype}; pass the tokenizer's "
            "input_ids (torch.long), not embeddings or probabilities"
        )
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(ids.shape)}")
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask, device=device)
    if mask.dim() == 1:
        mask = mask[None]
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask {tuple(mask.shape)} does not match input_ids {tuple(ids.shape)}")
    if bool(((mask != 0) & (mask != 1)).any()):
        odd = sorted({float(v) for v in mask[(mask != 0) & (mask != 1)].flatten()[:5].tolist()})
        raise ValueError(
            f"attention_mask must hold only 0 (padding) and 1 (real token), found {odd}; "
            "pass the tokenizer's attention_mask"
        )
    if bool((mask.sum(-1) == 0).any()):
        raise ValueError("a row has no real tokens (its attention_mask is all zeros)")
    return ids.long(), mask.long()
