"""Splicing a "flat" module: one that sees the [batch * seq, ...] tokens as its first axis, as a
mixture-of-experts block calls its router and its experts.

The grafted rows index the tokens directly. The donor module is called on every tensor argument
taken at those rows (the experts get hidden states, top-k indices and top-k weights), and every
tensor of its output that lies along the tokens (each of the router's logits, scores and
indices) replaces the recipient's there.

Single experts: the experts' output is linear in the top-k weights, so "experts S from the
donor, the rest from the recipient" is R(x, idx, w * [idx not in S]) + D(x, idx, w * [idx in S]):
each token's chosen experts (the recipient's routing unless the router is grafted too) computed
with the weights of the model that owns them there.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from weightgraft.adapters.call_forms import (
    call_flat,
    first_tensor,
    rows_of_arguments,
    splice_flat_output,
    token_count,
)


def splice_flat(
    path: str,
    modules: Mapping[int, nn.Module],
    args: tuple,
    kwargs: dict,
    output: object,
    splices: list,
    recipient_module: nn.Module,
) -> object:
    """`output` (changed in place) with the spliced tokens replaced by their donor's output."""
    x = first_tensor(args, kwargs)
    tokens = token_count(x, output)
    if tokens < 0:
        raise RuntimeError(
            f"cannot graft {path!r} as a 'flat' module: its first tensor argument and some tensor of its output "
            "must have the tokens as their first axis; check the call_forms of the architecture's adapter"
        )
    for splice in splices:
        rows = _flat_rows(path, splice.rows, tokens)
        if rows.device != x.device:
            rows = rows.to(x.device)
        if rows.numel() == 0:
            continue
        donor_module = modules[splice.donor]
        if getattr(donor_module, "adds_to_output", False) or splice.columns is not None or splice.inputs is not None:
            raise RuntimeError(f"cannot graft {path!r}: a 'flat' module is grafted whole, or by experts")
        if splice.experts is None:
            donor = call_flat(donor_module, args, kwargs, rows, tokens)
        else:
            donor = experts_mix(path, donor_module, recipient_module, args, kwargs, rows, tokens, splice.experts)
        splice_flat_output(output, donor, rows, tokens)
    return output


def _flat_rows(path: str, rows: dict[tuple[int, int], torch.Tensor], tokens: int) -> torch.Tensor:
    """The rows planned for the (batch, seq) whose batch * seq tokens the module sees."""
    for (batch, seq), found in rows.items():
        if batch * seq == tokens:
            return found
    raise RuntimeError(
        f"graft rows for {sorted(rows)} (batch, seq) do not fit the {tokens} tokens that {path!r} sees; "
        "check the call_forms of the architecture's adapter"
    )


def experts_mix(
    path: str,
    donor_module: nn.Module,
    recipient_module: nn.Module,
    args: tuple,
    kwargs: dict,
    rows: torch.Tensor,
    tokens: int,
    experts: torch.Tensor,
) -> torch.Tensor:
    """The experts' output at `rows` with `experts` from the donor and the rest from the recipient."""
    picked_args, picked_kwargs = rows_of_arguments(args, kwargs, rows, tokens)
    slots = [(i, a) for i, a in enumerate(picked_args)] + list(picked_kwargs.items())
    tensors = [(slot, v) for slot, v in slots if isinstance(v, torch.Tensor)]
    index = next((v for _, v in tensors if not v.is_floating_point() and v.dtype != torch.bool), None)
    weight_slot = next(
        (s for s, v in tensors if index is not None and v.is_floating_point() and v.shape == index.shape), None
    )
    if weight_slot is None:
        raise RuntimeError(
            f"cannot graft single experts of {path!r}: its call has no top-k indices and top-k weights of one "
            "shape; graft the experts whole"
        )
    weights = picked_args[weight_slot] if isinstance(weight_slot, int) else picked_kwargs[weight_slot]
    chosen = torch.isin(index, experts.to(index.device))

    def call(module, kept: torch.Tensor):
        masked = weights.masked_fill(~kept, 0)
        if isinstance(weight_slot, int):
            new_args = (*picked_args[:weight_slot], masked, *picked_args[weight_slot + 1 :])
            return module(*new_args, **picked_kwargs)
        return module(*picked_args, **{**picked_kwargs, weight_slot: masked})

    own = call(recipient_module.forward, ~chosen)  # .forward: not through the hooks again
    theirs = call(donor_module, chosen)
    return own + theirs.to(own.device, own.dtype)
