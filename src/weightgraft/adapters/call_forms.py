"""How a donor module is called on the grafted rows: one implementation for the engine's hooks
and for `check_adapter`, so that an adapter the check passes is called the same way in a graft.

A module's call form (`Adapter.call_forms`, see `base.CALL_FORMS`) says what its input looks
like: "rows" and "batched" modules see [batch, seq, ...] and are called on the grafted rows as
[rows, ...] or [1, rows, ...]; "flat" modules (a mixture-of-experts router, its experts) see the
[batch * seq, ...] tokens as their first axis, with every tensor argument and output laid out
along it; a "whole" module (a position embedding that reads the attention mask) is called on
exactly the arguments the recipient's module got, and its [batch, seq, ...] output is spliced;
a "per_expert" module (Llama 4's experts) sees every token once per expert, expert-major.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

FORM_WORDS = {
    "rows": "on [rows, ...]",
    "batched": "on [1, rows, ...]",
    "flat": "on [tokens, ...], every tensor argument taken at the rows",
    "whole": "on the very arguments the module got, its output taken at the rows",
    "per_expert": "on [experts * rows, ...], the rows' tokens once per expert, expert-major",
}


def call_on_rows(module: Callable, form: str, picked: torch.Tensor) -> torch.Tensor:
    """A "rows" or "batched" module's output on `picked` rows [rows, ...], as [rows, ...]."""
    if form == "batched":
        out = module(picked.unsqueeze(0))
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"a 'batched' module must return a tensor, not {type(out).__name__}")
        return out.squeeze(0)
    return module(picked)


def first_tensor(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The module's first tensor argument (positional first, then keyword)."""
    return next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)


def _on_tokens(value: object, tokens: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == tokens


def _on_batch_and_seq(value: object, tokens: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() >= 3 and value.shape[0] * value.shape[1] == tokens


def token_count(x: torch.Tensor | None, output: object) -> int:
    """How many tokens a "flat" module's call covers: its first argument's first axis, or, for a
    module fed [batch, seq, ...] that returns flat tokens (DeepSeek-style routers), batch * seq;
    -1 when its output lies along neither."""
    if x is None:
        return -1
    candidates = [x.shape[0]] + ([x.shape[0] * x.shape[1]] if x.dim() >= 3 else [])
    return next((t for t in candidates if token_outputs(output, t)), -1)


def rows_of_arguments(args: tuple, kwargs: dict, rows: torch.Tensor, tokens: int) -> tuple[tuple, dict]:
    """A "flat" module's arguments at `rows`: every tensor whose first axis is the `tokens`, and
    every [batch, seq, ...] tensor of batch * seq tokens, laid flat first."""

    def pick(value: object) -> object:
        if _on_tokens(value, tokens):
            return value.index_select(0, rows)
        if _on_batch_and_seq(value, tokens):
            return value.reshape(tokens, *value.shape[2:]).index_select(0, rows)
        return value

    return tuple(pick(a) for a in args), {name: pick(v) for name, v in kwargs.items()}


def token_outputs(output: object, tokens: int) -> list[int | None]:
    """Which parts of a "flat" module's output lie along the tokens: [None] for a tensor output
    that does, the indices of such tensors for a tuple or list output, [] for neither."""
    if isinstance(output, torch.Tensor):
        return [None] if _on_tokens(output, tokens) else []
    if isinstance(output, (tuple, list)):
        return [i for i, part in enumerate(output) if _on_tokens(part, tokens)]
    return []


def part_of(output: object, index: int | None) -> torch.Tensor:
    return output if index is None else output[index]


def call_flat(module: Callable, args: tuple, kwargs: dict, rows: torch.Tensor, tokens: int) -> object:
    """A "flat" module's output on its arguments taken at `rows` (of `tokens`)."""
    picked_args, picked_kwargs = rows_of_arguments(args, kwargs, rows, tokens)
    return module(*picked_args, **picked_kwargs)


def splice_flat_output(output: object, donor: object, rows: torch.Tensor, tokens: int) -> None:
    """Write `donor` (a flat module's output on `rows`) into `output` at `rows`, in place, for
    every part of the output that lies along the tokens."""
    for index in token_outputs(output, tokens):
        target, source = part_of(output, index), part_of(donor, index)
        target.index_copy_(0, rows, source.to(target.device, target.dtype))


def experts_count(module: nn.Module) -> int | None:
    """The number of experts of a module holding every expert's weights on a leading axis: the
    common leading size of its 3-D parameters (None without any, or when they disagree)."""
    sizes = {p.shape[0] for p in module.parameters() if p.dim() == 3}
    return sizes.pop() if len(sizes) == 1 else None


def call_whole(module: Callable, args: tuple, kwargs: dict, seq_dim: int = 1) -> torch.Tensor:
    """A "whole" module's output on the arguments the recipient's module got, with its sequence
    axis moved to dim 1 and laid flat: [batch * seq, ...], the rows the engine splices."""
    out = module(*args, **kwargs)
    if not isinstance(out, torch.Tensor) or out.dim() <= max(seq_dim, 1):
        raise TypeError(f"a 'whole' module must return a [batch, seq, ...] tensor, not {type(out).__name__}")
    out = out.movedim(seq_dim, 1)
    return out.reshape(out.shape[0] * out.shape[1], *out.shape[2:])


def per_expert_rows(rows: torch.Tensor, tokens: int, experts: torch.Tensor) -> torch.Tensor:
    """Rows of a "per_expert" module's [count * tokens, ...] input or output that hold token
    `rows` for each of `experts`, expert-major: e * tokens + row."""
    return (experts.to(rows.device)[:, None] * tokens + rows[None, :]).reshape(-1)


def call_per_expert(module: Callable, x: torch.Tensor, rows: torch.Tensor, tokens: int, count: int) -> torch.Tensor:
    """A "per_expert" module's output on token `rows` (of `tokens`) for all its `count` experts:
    [count * len(rows), ...], expert-major, as it lays out its own input."""
    return module(x.index_select(0, per_expert_rows(rows, tokens, torch.arange(count, device=rows.device))))


def token_major(value: torch.Tensor, count: int) -> torch.Tensor:
    """A "per_expert" [count * tokens, ...] tensor as [tokens, count * ...]: one row per token."""
    tokens = value.shape[0] // count
    return value.reshape(count, tokens, -1).transpose(0, 1).reshape(tokens, -1)
