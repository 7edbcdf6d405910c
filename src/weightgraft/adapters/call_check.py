"""`check_adapter`'s look at one named module during its probe pass: the module's input and output
keep the layout its call form and sequence axis declare, and calling it on some rows exactly as
the engine calls a donor module (`call_forms`) runs and gives the module's own output there.

So a module that unpacks batch and sequence, or one that sees flat tokens, is caught here with
the call form to declare, before a graft can crash on it.
"""

from __future__ import annotations

import torch
from torch import nn

from weightgraft.adapters.call_forms import (
    FORM_WORDS,
    call_flat,
    call_on_rows,
    call_per_expert,
    call_whole,
    experts_count,
    first_tensor,
    part_of,
    token_count,
    token_major,
    token_outputs,
)

# Rows of the probe's tokens that the check calls each module on: not a prefix, not every row.
PROBE_ROWS = (0, 2)

_DECLARE = (
    "declare its call form in call_forms ('batched' for a block that unpacks batch and sequence, 'flat' for a "
    "module that sees the tokens as its first axis, as a MoE router and experts do; 'whole', in model_call_forms "
    "for a model-level module, for one whose inputs are not rows of hidden states)"
)


def call_problems(
    path: str, module: nn.Module, form: str, seq_dim: int, args: tuple, kwargs: dict, output: object, length: int
) -> list[str]:
    """What is wrong with `module` (at `path`) on the probe's [1, `length`] input: its layout, or
    its output when called on rows as the engine does."""
    x = first_tensor(args, kwargs)
    if form == "flat":
        if token_count(x, output) != length:
            shapes = (None if x is None else tuple(x.shape), _shape(output))
            return [
                f"{path!r} is declared 'flat' but maps {shapes[0]} to {shapes[1]} on {length} tokens: its first "
                f"tensor argument and some tensor of its output must have the {length} tokens as their first axis; "
                "fix its call form in call_forms"
            ]
        return _rows_problems(
            path, module, form, lambda rows: call_flat(module, args, kwargs, rows, length), output, length
        )
    if form == "whole":
        return _whole_problems(path, module, seq_dim, args, kwargs, output, length)
    if form == "per_expert":
        return _per_expert_problems(path, module, x, output, length)
    if not isinstance(output, torch.Tensor) or not isinstance(x, torch.Tensor):
        return [f"{path!r} does not map a tensor to a tensor; name a position-wise module, or {_DECLARE}"]
    if any(t.dim() <= seq_dim or t.shape[0] != 1 or t.shape[seq_dim] != length for t in (x, output)):
        return [
            f"{path!r} maps {tuple(x.shape)} to {tuple(output.shape)} on a [1, {length}] input: it does not keep "
            f"[batch, seq, ...] with seq at dim {seq_dim}; name a position-wise module, declare its sequence axis "
            f"in seq_dims, or {_DECLARE}"
        ]
    flat_x = x.movedim(seq_dim, 1).reshape(length, *x.movedim(seq_dim, 1).shape[2:])
    flat_out = output.movedim(seq_dim, 1).reshape(length, *output.movedim(seq_dim, 1).shape[2:])

    def call(rows: torch.Tensor) -> torch.Tensor:
        return call_on_rows(module, form, flat_x.index_select(0, rows))

    return _rows_problems(path, module, form, call, flat_out, length)


def _whole_problems(
    path: str, module: nn.Module, seq_dim: int, args: tuple, kwargs: dict, output: object, length: int
) -> list[str]:
    """A "whole" module: only its output must keep [batch, seq, ...]; it is called again on its
    own arguments, and the rows of that call must be the pass's own."""
    if not isinstance(output, torch.Tensor) or output.dim() <= seq_dim or output.shape[seq_dim] != length:
        return [
            f"{path!r} is declared 'whole' but returns {_shape(output)} on a [1, {length}] input: its output must be "
            f"a [batch, seq, ...] tensor with seq at dim {seq_dim}; fix its call form"
        ]
    flat_out = output.movedim(seq_dim, 1).reshape(length, *output.movedim(seq_dim, 1).shape[2:])

    def call(rows: torch.Tensor) -> torch.Tensor:
        return call_whole(module, args, kwargs, seq_dim).index_select(0, rows)

    return _rows_problems(path, module, "whole", call, flat_out, length)


def _per_expert_problems(
    path: str, module: nn.Module, x: torch.Tensor | None, output: object, length: int
) -> list[str]:
    """A "per_expert" module: input and output [experts * tokens, ...]; called on some tokens'
    rows of every expert, it must give the pass's own rows there."""
    count = experts_count(module)
    fits = count is not None and isinstance(x, torch.Tensor) and isinstance(output, torch.Tensor)
    if not fits or x.shape[0] != count * length or output.shape[0] != count * length:
        shapes = (None if x is None else tuple(x.shape), _shape(output))
        return [
            f"{path!r} is declared 'per_expert' but maps {shapes[0]} to {shapes[1]} with {count} experts on {length} "
            f"tokens: its input and output must be [experts * tokens, ...], expert-major; fix its call form"
        ]

    def call(rows: torch.Tensor) -> torch.Tensor:
        return token_major(call_per_expert(module, x, rows, length, count), count)

    return _rows_problems(path, module, "per_expert", call, token_major(output, count), length)


def _rows_problems(path: str, module: nn.Module, form: str, call, output: object, length: int) -> list[str]:
    """Call the module on PROBE_ROWS; its output there must be the pass's own."""
    device = next((t.device for t in module.parameters()), torch.device("cpu"))
    rows = torch.tensor(PROBE_ROWS, device=device)
    how = f"called on rows as the engine calls it (call form {form!r}: {FORM_WORDS[form]})"
    try:
        donor = call(rows)
    except Exception as error:  # the point is to catch whatever a graft would crash on
        return [f"{path!r} {how} raises {type(error).__name__}: {str(error)[:120]}; {_DECLARE}"]
    for index in token_outputs(output, length):
        mine = part_of(output, index).index_select(0, rows.to(part_of(output, index).device))
        theirs = _part_or_none(donor, index)
        if theirs is None or tuple(theirs.shape) != tuple(mine.shape):
            return [
                f"{path!r} {how} gives {_shape(donor)} where its output has {tuple(mine.shape)} at those rows; "
                f"{_DECLARE}"
            ]
        scale = float(mine.abs().max()) if mine.numel() and mine.is_floating_point() else 1.0
        if not torch.allclose(theirs.to(mine.dtype), mine, rtol=1e-3, atol=1e-4 * max(scale, 1.0)):
            return [f"{path!r} {how} does not give its own output at those rows; {_DECLARE}"]
    return []


def _part_or_none(output: object, index: int | None) -> torch.Tensor | None:
    if index is None:
        return output if isinstance(output, torch.Tensor) else None
    if isinstance(output, (tuple, list)) and index < len(output) and isinstance(output[index], torch.Tensor):
        return output[index]
    return None


def _shape(value: object) -> object:
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if isinstance(value, (tuple, list)):
        return tuple(_shape(v) for v in value)
    return type(value).__name__
