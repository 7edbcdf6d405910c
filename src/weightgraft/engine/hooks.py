"""Forward hooks that splice donor module outputs into the recipient's forward pass.

Every grafted component acts on one position at a time, so computing it with a donor's weights
at a position equals replacing the recipient module's output row there with the donor module's
output on the same input row. A donor runs only on the rows grafted from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from weightgraft.adapters.base import Adapter
from weightgraft.adapters.call_forms import call_on_rows, call_whole, first_tensor
from weightgraft.engine.flat_splice import splice_flat
from weightgraft.engine.per_expert_splice import splice_per_expert


@dataclass
class Splice:
    """Rows of one module's output that come from one donor; `columns` None means every column.
    With `inputs`, only those input columns compute with the donor's weights: the rows become
    R(x) + [D(x_in) - D(0)] - [R(x_in) - R(0)], x_in being x with the other columns zeroed (for
    an affine module, the change that swapping those weight columns makes; biases cancel)."""

    # Flat row indices into the output's [batch * seq] rows, keyed by the (batch, seq) the module
    # is expected to see (the unembedding may see only the last position: logits_to_keep).
    rows: dict[tuple[int, int], torch.Tensor]
    columns: torch.Tensor | None
    donor: int  # index among the Grafter's donors
    inputs: torch.Tensor | None = None
    # Single experts of an experts module: these come from the donor, the rest from the recipient.
    experts: torch.Tensor | None = None


class SpliceHooks:
    """Holds the splices for the chunk being run; hooks read them by module path."""

    def __init__(
        self,
        recipient: nn.Module,
        donor_modules: Mapping[str, Mapping[int, nn.Module]],
        seq_dims: dict[str, int],
        call_forms: dict[str, str] | None = None,
    ):
        self.recipient = recipient
        self.donor_modules = donor_modules  # path -> donor index -> the donor's module there
        self.paths = list(donor_modules)
        self.seq_dims = seq_dims  # modules whose sequence axis is not dim 1 (e.g. [batch, heads, seq, dim])
        self.call_forms = call_forms or {}  # modules not called as "rows" (adapters.base.CALL_FORMS)
        self.current: dict[str, list[Splice]] = {}

    @contextmanager
    def installed(self) -> Iterator[SpliceHooks]:
        handles = []
        try:
            for path in self.paths:
                module = self.recipient.get_submodule(path)
                hook = self._make_hook(path, self.donor_modules[path])
                handles.append(module.register_forward_hook(hook, with_kwargs=True))
            yield self
        finally:
            for handle in handles:
                handle.remove()
            self.current = {}

    def _make_hook(self, path: str, modules: Mapping[int, nn.Module]):
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: torch.Tensor):
            splices = self.current.get(path)
            if not splices:
                return None
            form = self.call_forms.get(path, "rows")
            if form == "flat":
                shape = _plain_flat_shape(args, kwargs, output, splices)
                if shape is None:
                    return splice_flat(path, modules, args, kwargs, output, splices, module)
                x = args[0].reshape(*shape, *args[0].shape[1:])  # one tensor in, one out: rows, as [batch, seq, ...]
                spliced = splice_rows(path, modules, x, output.reshape(*shape, *output.shape[1:]), splices, module)
                return spliced.reshape(output.shape)
            if form == "per_expert":
                return splice_per_expert(path, modules, first_tensor(args, kwargs), output, splices, module)
            seq_dim = self.seq_dims.get(path, 1)
            if form == "whole":
                return splice_rows(path, modules, None, output, splices, module, form, (args, kwargs, seq_dim))
            x = args[0] if args else next(iter(kwargs.values()))
            if seq_dim == 1:
                return splice_rows(path, modules, x, output, splices, module, form)
            spliced = splice_rows(path, modules, x.movedim(seq_dim, 1), output.movedim(seq_dim, 1), splices, form=form)
            return spliced.movedim(1, seq_dim)

        return hook


def _plain_flat_shape(args: tuple, kwargs: dict, output: object, splices: list[Splice]) -> tuple[int, int] | None:
    """The (batch, seq) of a "flat" module that maps one tensor of [batch * seq, ...] tokens to one
    (OPT's MLP, a shared expert): spliced as rows, so that neurons and adapter deltas work there
    too. None for a module with more arguments or outputs (a router, the experts)."""
    if any(splice.experts is not None for splice in splices):
        return None  # single experts are mixed by flat_splice (or refused there)
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    if len(tensors) != 1 or not args or args[0] is not tensors[0] or not isinstance(output, torch.Tensor):
        return None
    tokens = args[0].shape[0] if args[0].dim() >= 1 else -1
    if output.dim() < 1 or output.shape[0] != tokens:
        return None
    return next(((b, s) for splice in splices for (b, s) in splice.rows if b * s == tokens), None)


def splice_rows(
    path: str,
    modules: Mapping[int, nn.Module],
    x: torch.Tensor,
    output: torch.Tensor,
    splices: list[Splice],
    recipient_module: nn.Module | None = None,
    form: str = "rows",
    whole: tuple[tuple, dict, int] | None = None,
) -> torch.Tensor:
    """`output` with the spliced rows (and columns) replaced by their donor module's output,
    the donor module called on the rows in its call `form` ("rows" or "batched"), or, for a
    "whole" module, on `whole`: the (args, kwargs, sequence axis) the recipient's module got."""
    if whole is not None:
        output = output.movedim(whole[2], 1) if isinstance(output, torch.Tensor) else output
        x = output  # a "whole" module's input need not lie along the rows: only its output does
    if not isinstance(output, torch.Tensor) or x.shape[:2] != output.shape[:2]:
        raise RuntimeError(
            f"cannot graft {path!r}: it is not a position-wise module with [batch, seq, ...] input and "
            "output tensors; check the architecture's adapter"
        )
    batch, seq = output.shape[:2]
    flat_x = x.reshape(batch * seq, *x.shape[2:])
    flat_out = output.reshape(batch * seq, *output.shape[2:])
    for splice in splices:
        rows = splice.rows.get((batch, seq))
        if rows is None:
            raise RuntimeError(
                f"graft rows for {sorted(splice.rows)} (batch, seq) do not fit the output {tuple(output.shape)} "
                f"of {path!r}; if this module's sequence axis is not dim 1, declare it in the adapter's seq_dims"
            )
        if rows.device != flat_out.device:  # a model spread over devices (device_map)
            rows = rows.to(flat_out.device)
        if rows.numel() == 0:
            continue
        donor_module = modules[splice.donor]
        if whole is not None:
            if splice.inputs is not None:
                raise RuntimeError(f"cannot graft input columns of {path!r}: it is called 'whole', not on rows")
            donor_rows = call_whole(donor_module, *whole).index_select(0, rows)
        else:
            # index_select / index_copy_ rather than x[rows] / out[rows] = ...: the same copies, but
            # advanced indexing costs tens of times more on CPU for the few rows a graft usually has.
            picked = flat_x.index_select(0, rows)
            if splice.inputs is not None:
                change = _input_columns_change(donor_module, recipient_module, picked, splice.inputs)
                change = flat_out.index_select(0, rows) + change.to(flat_out.device, flat_out.dtype)
                flat_out.index_copy_(0, rows, change)
                continue
            donor_rows = donor_module(picked) if form == "rows" else call_on_rows(donor_module, form, picked)
        if getattr(donor_module, "adds_to_output", False):  # an adapter's delta on the recipient's output
            donor_rows = flat_out.index_select(0, rows) + donor_rows
        donor_rows = donor_rows.to(flat_out.device, flat_out.dtype)  # no-op unless it differs
        if splice.columns is not None:
            columns = splice.columns if splice.columns.device == flat_out.device else splice.columns.to(flat_out.device)
            kept = flat_out.index_select(0, rows)
            donor_rows = kept.index_copy_(-1, columns, donor_rows.index_select(-1, columns))  # last axis: features
        flat_out.index_copy_(0, rows, donor_rows)
    spliced = flat_out.reshape(output.shape)
    return spliced.movedim(1, whole[2]) if whole is not None else spliced


def _input_columns_change(
    donor_module: nn.Module, recipient_module: nn.Module | None, x: torch.Tensor, columns: torch.Tensor
) -> torch.Tensor:
    """The change to an affine module's output when its weight's `columns` (input features) come
    from the donor: [D(x_in) - D(0)] - [R(x_in) - R(0)]; an adapter's delta needs no R term."""
    columns = columns if columns.device == x.device else columns.to(x.device)
    kept = torch.zeros((x.shape[0] + 1, *x.shape[1:]), dtype=x.dtype, device=x.device)  # last row: zero input
    kept[:-1, columns] = x[:, columns]
    donor = donor_module(kept)
    change = donor[:-1] - donor[-1:]
    if getattr(donor_module, "adds_to_output", False):
        return change
    if recipient_module is None:
        raise RuntimeError("an input-column graft needs the recipient's module")
    own = recipient_module.forward(kept)  # .forward: not through the hooks again
    return change - (own[:-1] - own[-1:]).to(change.dtype)


def module_layouts(adapter: Adapter, num_layers: int) -> tuple[dict[str, int], dict[str, str]]:
    """Per hooked module path: its sequence axis where not 1, and its call form where not "rows"."""
    seq_dims = {
        f"{adapter.layers}.{i}.{local}": dim for local, dim in adapter.seq_dims.items() for i in range(num_layers)
    }
    forms = {
        f"{adapter.layers}.{i}.{local}": form for local, form in adapter.call_forms.items() for i in range(num_layers)
    }
    forms.update(adapter.model_call_forms)
    return seq_dims, {path: form for path, form in forms.items() if form != "rows"}
