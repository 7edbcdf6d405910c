"""The inputs of one `Grafter` call, checked before any work: integer token ids and a 0/1
attention mask of the same [batch, seq] shape, every row with a real token; or prompts whose
tokens carry roles (`RolePrompt`), which resolve a `Graft`'s role positions ("FE+LT")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

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


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Each token's position counted from its row's first real token, so that a left-padded row
    sees the positions it would see alone (padding takes position 0, which its mask hides)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def last_real_index(mask: torch.Tensor) -> torch.Tensor:
    """The index of each row's last real token, whichever side the row is padded on."""
    return mask.long().cumsum(-1).argmax(-1)


@runtime_checkable
class RolePrompt(Protocol):
    """A prompt whose tokens carry roles (`weightgraft.Prompt`): its token ids and, per role
    name (`first_entity`, `movie_title`, `relation`, `last_token`), the indices of its tokens."""

    input_ids: list[int]
    roles: dict[str, list[int]]


# What a Grafter call takes as its rows: token ids [batch, seq], one prompt with roles, a list of
# them, or a padded batch of them (an object with input_ids, attention_mask and roles).
CallInputs = torch.Tensor | Sequence[Sequence[int]] | RolePrompt | Sequence[RolePrompt] | object


def call_inputs(
    inputs: object, attention_mask: torch.Tensor | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, list[dict[str, list[int]]] | None]:
    """`(ids, mask, roles)` of a call: token ids (roles None), one prompt with roles or a list of
    them (left-padded here; roles per row), or a padded batch of them (`Prompt.batch`: an object
    with `input_ids`, `attention_mask` tensors and `roles`, one dict per row)."""
    if _is_prompt(inputs):
        inputs = [inputs]
    if isinstance(inputs, (list, tuple)) and inputs and all(_is_prompt(p) for p in inputs):
        if attention_mask is not None:
            raise ValueError("prompts with roles are padded here: pass them without attention_mask")
        seqs = [list(p.input_ids) for p in inputs]
        ids, mask, _ = align_on(seqs, [len(s) - 1 for s in seqs], 0)  # left-padded
        ids, mask = prepare_inputs(ids, mask, device)
        return ids, mask, [dict(p.roles) for p in inputs]
    roles = getattr(inputs, "roles", None)
    if roles is not None and not isinstance(inputs, torch.Tensor):
        ids, mask = prepare_inputs(inputs.input_ids, getattr(inputs, "attention_mask", attention_mask), device)
        if len(roles) != ids.shape[0]:
            raise ValueError(f"a batch of {ids.shape[0]} rows has roles for {len(roles)}; give one dict per row")
        return ids, mask, [dict(r) for r in roles]
    ids, mask = prepare_inputs(inputs, attention_mask, device)
    return ids, mask, None


def _is_prompt(value: object) -> bool:
    """One prompt with roles (its ids a list), not a padded batch of them (its ids a tensor)."""
    return isinstance(value, RolePrompt) and not isinstance(value.input_ids, torch.Tensor)


def align_on(
    seqs: Sequence[Sequence[int]], anchors: Sequence[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(input_ids, attention_mask, column): each row padded on the left so that its token at index
    `anchors[row]` falls in one `column`, and on the right to a common width.

    The runner aligns rows on the prompt's last token: rows of one prompt part ways there (the
    paper's conditions graft there or earlier), so with the prefix before it in the same columns
    the engine shares it in one segment, and the scored logits are the last columns of every row.
    """
    column = max(anchors)
    width = column + max(len(s) - a for s, a in zip(seqs, anchors))
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for row, (seq, anchor) in enumerate(zip(seqs, anchors)):
        start = column - anchor
        ids[row, start : start + len(seq)] = torch.tensor(seq, dtype=torch.long)
        mask[row, start : start + len(seq)] = 1
    return ids, mask, column
