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


@dataclass
class Splice:
    """Rows of one module's output that come from one donor; `columns` None means every column."""

    # Flat row indices into the output's [batch * seq] rows, keyed by the (batch, seq) the module
    # is expected to see (the unembedding may see only the last position: logits_to_keep).
    rows: dict[tuple[int, int], torch.Tensor]
    columns: torch.Tensor | None
    donor: int  # index among the Grafter's donors


class SpliceHooks:
    """Holds the splices for the chunk being run; hooks read them by module path."""

    def __init__(
        self,
        recipient: nn.Module,
        donor_modules: Mapping[str, Mapping[int, nn.Module]],
        seq_dims: dict[str, int],
    ):
        self.recipient = recipient
        self.donor_modules = donor_modules  # path -> donor index -> the donor's module there
        self.paths = list(donor_modules)
        self.seq_dims = seq_dims  # modules whose sequence axis is not dim 1 (e.g. [batch, heads, seq, dim])
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
            x = args[0] if args else next(iter(kwargs.values()))
            seq_dim = self.seq_dims.get(path, 1)
            if seq_dim == 1:
                return splice_rows(path, modules, x, output, splices)
            spliced = splice_rows(path, modules, x.movedim(seq_dim, 1), output.movedim(seq_dim, 1), splices)
            return spliced.movedim(1, seq_dim)

        return hook


def splice_rows(
    path: str,
    modules: Mapping[int, nn.Module],
    x: torch.Tensor,
    output: torch.Tensor,
    splices: list[Splice],
) -> torch.Tensor:
    """`output` with the spliced rows (and columns) replaced by their donor module's output."""
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
        if rows.numel() == 0:
            continue
        donor_rows = modules[splice.donor](flat_x[rows]).to(flat_out.dtype)
        if splice.columns is None:
            flat_out[rows] = donor_rows
        else:
            flat_out[rows[:, None], splice.columns[None, :]] = donor_rows[:, splice.columns]
    return flat_out.reshape(output.shape)
