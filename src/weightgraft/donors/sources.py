"""The donor contract (`DonorSource`, described in the package docstring) and the turning of what a
user passes to `Grafter` into a source."""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PretrainedConfig

from weightgraft.donors.checkpoint import resolve_folder
from weightgraft.donors.full import FullDonor
from weightgraft.donors.lazy import CheckpointLayoutError, LazyDonor
from weightgraft.donors.lora import PEFT_CONFIG_FILE, LoraDonor


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
        return LoraDonor(obj, _needs(recipient, "a PeftModel"))
    if isinstance(obj, DonorSource):
        return obj
    if isinstance(obj, nn.Module):
        return FullDonor(obj)
    if isinstance(obj, (str, Path)):
        folder = resolve_folder(obj, kind="donor")
        if (folder / PEFT_CONFIG_FILE).is_file():
            return LoraDonor(folder, _needs(recipient, "an adapter folder"))
        try:
            return LazyDonor(folder)
        except CheckpointLayoutError as err:
            return _whole_donor(folder, recipient, err)
    raise TypeError(
        f"a donor must be a torch model (e.g. AutoModelForCausalLM.from_pretrained(...)), a checkpoint or "
        f"adapter folder, a peft.PeftModel or a weightgraft.donors.DonorSource, not {type(obj).__name__}"
    )


def _whole_donor(folder: Path, recipient: nn.Module | None, err: CheckpointLayoutError) -> FullDonor:
    """A checkpoint transformers converts as it loads (a MoE block's experts stored one tensor
    each), loaded whole in the recipient's dtype and device; refused, as the lazy reader would
    have refused it, when any parameter is missing from it or of another shape (never a weight left
    at its random initialisation)."""
    first = next(recipient.parameters()) if recipient is not None else None
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            folder,
            trust_remote_code=False,
            use_safetensors=True,
            dtype=first.dtype if first is not None else torch.float32,
            output_loading_info=True,
        )
    except (RuntimeError, OSError, ValueError) as load_err:  # tensors of another shape: refused by transformers
        raise ValueError(f"{err}; loading it whole fails: {str(load_err).splitlines()[0][:200]}") from None
    if info.get("missing_keys") or info.get("mismatched_keys"):
        raise ValueError(
            f"{err}; loading it whole leaves {sorted(info.get('missing_keys') or [])[:6]} missing"
        ) from None
    return FullDonor(model.to(first.device if first is not None else "cpu").eval())


def _is_peft_model(obj: object) -> bool:
    """Without importing peft unless the object comes from it (peft: 1.9 s more at a run's start,
    measured on a loaded 2-core machine; see `donors.lora`)."""
    if not type(obj).__module__.startswith("peft"):
        return False
    from peft import PeftModel

    return isinstance(obj, PeftModel)


def _needs(recipient: nn.Module | None, what: str) -> nn.Module:
    if recipient is None:
        raise TypeError(f"{what} is a donor relative to a recipient: pass the recipient to as_donor_source")
    return recipient
