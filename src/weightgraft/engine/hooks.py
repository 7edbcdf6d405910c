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

    mask: torch.Tensor  # bool [batch, seq] for the chunk being computed
    columns: torch.Tensor | None
    donor: int  # index among the Grafter's donors


class SpliceHooks:
    """Holds the splices for the chunk being run; hooks read them by module path."""

    def __init__(
        self,
        recipient: nn.Module,
        donor_modules: Mapping[str, Mapping[int, nn.Module]],
        seq_dims: dict[str, int],
        lm_head_path: str,
    ):
        self.recipient = recipient
        self.donor_modules = donor_modules  # path -> donor index -> the donor's module there
        self.paths = list(donor_modules)
        self.seq_dims = seq_dims  # modules whose sequence axis is not dim 1 (e.g. [batch, heads, seq, dim])
        self.lm_head_path = lm_head_path  # the unembedding may see only the last positions (logits_to_keep)
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
                return splice_rows(path, modules, x, output, splices, path == self.lm_head_path)
            spliced = splice_rows(path, modules, x.movedim(seq_dim, 1), output.movedim(seq_dim, 1), splices)
            return spliced.movedim(1, seq_dim)

        return hook


def splice_rows(
    path: str,
    modules: Mapping[int, nn.Module],
    x: torch.Tensor,
    output: torch.Tensor,
    splices: list[Splice],
    may_see_tail: bool = False,
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
        mask = splice.mask
        fits = mask.shape[0] == batch and (mask.shape[1] == seq or (may_see_tail and mask.shape[1] > seq))
        if not fits:
            raise RuntimeError(
                f"graft mask {tuple(mask.shape)} does not fit the output {tuple(output.shape)} of {path!r}; "
                "if this module's sequence axis is not dim 1, declare it in the adapter's seq_dims"
            )
        # The unembedding may compute only the last positions (logits_to_keep).
        rows = mask[:, mask.shape[1] - seq :].reshape(-1).nonzero().squeeze(-1)
        if rows.numel() == 0:
            continue
        donor_rows = modules[splice.donor](flat_x[rows]).to(flat_out.dtype)
        if splice.columns is None:
            flat_out[rows] = donor_rows
        else:
            flat_out[rows[:, None], splice.columns[None, :]] = donor_rows[:, splice.columns]
    return flat_out.reshape(output.shape)
