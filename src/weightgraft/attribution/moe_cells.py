"""Attribution on a mixture-of-experts block: its "flat" modules (router, experts, shared expert),
which see the [batch * seq] tokens as their first axis.

- `experts`, `shared_expert`, `shared_expert_gate`: delta = donor(args) - recipient(args) on the
  module's own arguments, a [tokens, ...] output whose rows are the cells' (batch, seq) in order.
- `router`: its output (logits, top-k scores, top-k indices) has no straight line to the donor's,
  so its cell is measured where the routing acts, at the experts' output: delta = experts(x, the
  donor's routing) - experts(x, the recipient's routing), the recipient's experts. What grafting
  the router alone changes in the block, given x.
- single experts (`grain="expert"`): expert e's delta is experts(S={e} from the donor) - the
  recipient's experts (`engine.flat_splice.experts_mix`); the experts' output is linear in the
  top-k weights, so the experts' deltas sum to the component's.

In the donor-everywhere pass the router's hook hands on the donor's routing, so the experts run
on it and the block is the donor's exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from weightgraft.engine.flat_splice import experts_mix


def routing_pair(values) -> tuple[int, int] | None:
    """(index of the top-k indices, index of the top-k weights) among `values`: an integer tensor
    and a floating one of the same shape; None when there is no such pair."""
    tensors = [(i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    index = next((i for i, v in tensors if not v.is_floating_point() and v.dtype != torch.bool), None)
    if index is None:
        return None
    shape = values[index].shape
    weight = next((i for i, v in tensors if v.is_floating_point() and v.shape == shape), None)
    return None if weight is None else (index, weight)


def with_routing(args: tuple, routing: tuple) -> tuple:
    """The experts' positional arguments with their top-k indices and weights taken from a
    router's output."""
    mine, theirs = routing_pair(args), routing_pair(routing)
    if mine is None or theirs is None:
        raise RuntimeError("cannot attribute the router: its output or the experts' call has no top-k pair")
    new = list(args)
    new[mine[0]], new[mine[1]] = routing[theirs[0]], routing[theirs[1]].to(args[mine[1]].dtype)
    return tuple(new)


def router_delta(experts: nn.Module, args: tuple, kwargs: dict, output: torch.Tensor, routing: tuple) -> torch.Tensor:
    """The recipient's experts on the donor's routing minus their output on the recipient's."""
    return experts.forward(*with_routing(args, routing), **kwargs).to(output.dtype) - output


def expert_deltas(
    path: str, experts: nn.Module, donor: nn.Module, args: tuple, kwargs: dict, output: torch.Tensor, count: int
) -> torch.Tensor:
    """[experts, tokens, ...]: each expert's change to the experts' output, taken alone."""
    tokens = output.shape[0]
    rows = torch.arange(tokens, device=output.device)
    return torch.stack(
        [
            experts_mix(path, donor, experts, args, kwargs, rows, tokens, torch.tensor([e])).to(output.dtype) - output
            for e in range(count)
        ]
    )
