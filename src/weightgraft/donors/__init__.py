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

Optional members, used when present:

- a donor module with `adds_to_output = True` returns a delta that the engine adds to the
  recipient module's own output at the grafted rows (an adapter's change), instead of an output
  that replaces it;
- `changed_paths() -> set[str]`: the only module paths whose output the donor changes (an
  adapter's targets), for `Grafter.changed_components`;
- `prefetch(paths)` and `release()`: load ahead, and free, what `module(path)` loads.

`as_donor_source(obj, recipient)` turns what a user passes to `Grafter` into a source: a model in
memory (`FullDonor`), a checkpoint folder or hub id (`LazyDonor`), an adapter folder with
adapter_config.json or a `peft.PeftModel` (`AdapterDonor`, bound to `recipient`).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from torch import nn
from transformers import PretrainedConfig

from weightgraft.donors.adapter import ADAPTER_CONFIG, AdapterDonor
from weightgraft.donors.checkpoint import resolve_folder
from weightgraft.donors.full import FullDonor
from weightgraft.donors.lazy import LazyDonor


@runtime_checkable
class DonorSource(Protocol):
    """A donor for the engine; see the package docstring for the contract of each member."""

    config: PretrainedConfig

    def parameter_shapes(self) -> dict[str, torch.Size]: ...

    def check_against(self, recipient: nn.Module) -> None: ...

    def module(self, path: str) -> nn.Module: ...

    def running(self) -> AbstractContextManager: ...


def as_donor_source(obj: object, recipient: nn.Module | None = None) -> DonorSource:
    """A `DonorSource` for a donor given to `Grafter`: a source as is, a model in memory, a
    checkpoint or adapter folder (or hub id), or a PeftModel."""
    if _is_peft_model(obj):
        return AdapterDonor(obj, _needs(recipient, "a PeftModel"))
    if isinstance(obj, DonorSource):
        return obj
    if isinstance(obj, nn.Module):
        return FullDonor(obj)
    if isinstance(obj, (str, Path)):
        folder = resolve_folder(obj, kind="donor")
        if (folder / ADAPTER_CONFIG).is_file():
            return AdapterDonor(folder, _needs(recipient, "an adapter folder"))
        return LazyDonor(folder)
    raise TypeError(
        f"a donor must be a torch model (e.g. AutoModelForCausalLM.from_pretrained(...)), a checkpoint or "
        f"adapter folder, a peft.PeftModel or a weightgraft.donors.DonorSource, not {type(obj).__name__}"
    )


def _is_peft_model(obj: object) -> bool:
    """Without importing peft unless the object comes from it."""
    if not type(obj).__module__.startswith("peft"):
        return False
    from peft import PeftModel

    return isinstance(obj, PeftModel)


def _needs(recipient: nn.Module | None, what: str) -> nn.Module:
    if recipient is None:
        raise TypeError(f"{what} is a donor relative to a recipient: pass the recipient to as_donor_source")
    return recipient


__all__ = ["AdapterDonor", "DonorSource", "FullDonor", "LazyDonor", "as_donor_source"]
