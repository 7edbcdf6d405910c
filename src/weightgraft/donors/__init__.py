"""Where a donor module's output comes from.

The engine grafts by replacing a recipient module's output at grafted rows with "the donor's
module" applied to the same input. A `DonorSource` is anything that can hand out that module for a
recipient module path, so that the hooks never care whether the donor is a second model in
memory (`FullDonor`), tensors read lazily from a checkpoint, or the recipient plus an adapter.

The interface, in full (`Grafter` uses nothing else):

- `config`: the donor's Hugging Face config. The engine compares it with the recipient's on every
  field that changes the computation, before anything else.
- `parameter_shapes() -> dict[str, torch.Size]`: every donor parameter by its name in the
  recipient's naming (`model.layers.0.mlp.up_proj.weight`). The engine compares names and shapes
  with the recipient's; a lazy source can answer from checkpoint headers without reading tensors.
- `check_against(recipient)`: the checks only this kind of source can make (for a full model:
  not the recipient itself, same device and dtype per parameter). Raise ValueError/TypeError with
  the fix in the message.
- `module(path) -> nn.Module`: a module whose forward computes the donor's output for the
  recipient module at `path` (same input, same output shape), on the device and in the dtype the
  recipient module runs in. Called once per hooked path when a call's hooks are installed, so a
  lazy source can load on demand here. It must not modify the recipient.
- `running()`: a context manager around each engine call, e.g. to put the donor in eval mode and
  restore its mode afterwards.

`as_donor_source(obj)` turns what a user passes to `Grafter` into a source.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

import torch
from torch import nn
from transformers import PretrainedConfig

from weightgraft.donors.full import FullDonor


@runtime_checkable
class DonorSource(Protocol):
    """A donor for the engine; see the package docstring for the contract of each member."""

    config: PretrainedConfig

    def parameter_shapes(self) -> dict[str, torch.Size]: ...

    def check_against(self, recipient: nn.Module) -> None: ...

    def module(self, path: str) -> nn.Module: ...

    def running(self) -> AbstractContextManager: ...


def as_donor_source(obj: object) -> DonorSource:
    """A `DonorSource` for a donor given to `Grafter`: a source as is, or a model in memory."""
    if isinstance(obj, DonorSource):
        return obj
    if isinstance(obj, nn.Module):
        return FullDonor(obj)
    raise TypeError(
        f"a donor must be a torch model (e.g. AutoModelForCausalLM.from_pretrained(...)) or a "
        f"weightgraft.donors.DonorSource, not {type(obj).__name__}"
    )


__all__ = ["DonorSource", "FullDonor", "as_donor_source"]
