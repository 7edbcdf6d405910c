"""A donor read lazily from a safetensors checkpoint: only the grafted modules' tensors load.

Most sweeps graft a quarter of the layers or less, so holding the whole donor in memory wastes
most of it. The donor's modules here are those of an empty model (every parameter on the meta
device) built from the checkpoint's config.json; asking for the module at a path reads that
module's tensors from the memory-mapped file onto the device, and in the dtype, of the recipient's
module there, and keeps them until `release()`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from accelerate import init_empty_weights
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM

from weightgraft.donors.checkpoint import SafetensorsCheckpoint, resolve_folder
from weightgraft.donors.placement import execution_device


class CheckpointLayoutError(ValueError):
    """A checkpoint whose tensors are not the model's parameters one for one (transformers writes
    some, e.g. a mixture-of-experts block's experts one tensor each, and converts them as it
    loads): it cannot be read module by module."""


class LazyDonor:
    """A donor checkpoint (a local folder or a hub id) read module by module as grafts need it.

    Shapes come from the safetensors headers and the config from config.json, so the engine's
    checks against the recipient run before any tensor is read. `loaded` counts the tensors read.
    """

    def __init__(self, source: str | Path, revision: str | None = None):
        self.folder = resolve_folder(source, revision, kind="donor checkpoint")
        self.checkpoint = SafetensorsCheckpoint(self.folder)  # refuses pickle-only folders and missing shards
        if not (self.folder / "config.json").is_file():
            raise FileNotFoundError(f"donor checkpoint {self.folder} has no config.json; save it with save_pretrained")
        self.config = AutoConfig.from_pretrained(self.folder, trust_remote_code=False)
        with init_empty_weights():  # parameters on meta: no memory, no init time
            self.skeleton = AutoModelForCausalLM.from_config(self.config, trust_remote_code=False)
        self.skeleton.tie_weights()  # empty-weight init leaves tied parameters (lm_head, embeddings) apart
        self.skeleton.eval()
        self._tensor_names = self._match_checkpoint_names()
        self._recipient: nn.Module | None = None
        self._cache: dict[tuple[str, torch.device, torch.dtype], torch.Tensor] = {}
        self._materialized: list[tuple[nn.Module, str, nn.Parameter]] = []  # (module, name, its meta parameter)
        self._ready: set[str] = set()
        self.loaded: dict[str, int] = defaultdict(int)  # checkpoint tensor -> times read

    def __repr__(self) -> str:
        return f"LazyDonor({str(self.folder)!r}, {len(self._ready)} modules loaded)"

    # --- DonorSource ------------------------------------------------------------------------------
    def parameter_shapes(self) -> dict[str, torch.Size]:
        """Every donor parameter (the model's naming) with its shape in the checkpoint headers."""
        shapes = self.checkpoint.shapes()
        return {name: shapes[self._tensor_names[name]] for name, _ in self.skeleton.named_parameters()}

    def check_against(self, recipient: nn.Module) -> None:
        """Remember the recipient: each donor module goes where, and in the dtype that, the
        recipient's module runs. A new recipient starts from nothing loaded."""
        if self._recipient is not None and recipient is not self._recipient:
            self.release()
        self._recipient = recipient

    def module(self, path: str) -> nn.Module:
        """The donor's module at `path`, its tensors read now unless already loaded."""
        module = self.skeleton.get_submodule(path)
        if path in self._ready:
            return module
        if self._recipient is None:
            raise RuntimeError("LazyDonor.module() before check_against(recipient): use it through a Grafter")
        device = execution_device(self._recipient, path)
        slots = []  # (owner module, parameter name, full name) still on meta
        for local, owner in module.named_modules(prefix=path):
            slots += [(owner, n, f"{local}.{n}") for n, p in owner._parameters.items() if p is not None and p.is_meta]
            for name, buffer in list(owner._buffers.items()):
                if buffer is not None and buffer.device != device:
                    owner._buffers[name] = buffer.to(device)
        wanted = {(self._tensor_names[full], device, self._recipient.get_parameter(full).dtype) for _, _, full in slots}
        self._read([key for key in wanted if key not in self._cache])
        for owner, name, full in slots:
            key = (self._tensor_names[full], device, self._recipient.get_parameter(full).dtype)
            self._materialized.append((owner, name, owner._parameters[name]))
            owner._parameters[name] = nn.Parameter(self._cache[key], requires_grad=False)
        self._ready.add(path)
        return module

    @contextmanager
    def running(self) -> Iterator[None]:
        yield  # the skeleton is always in eval mode and holds nothing to restore

    # --- loading and freeing ----------------------------------------------------------------------
    def prefetch(self, paths: Iterable[str]) -> None:
        for path in paths:
            self.module(path)

    def release(self) -> None:
        """Free every loaded tensor; later calls read them again."""
        for owner, name, meta in reversed(self._materialized):
            owner._parameters[name] = meta
        self._materialized.clear()
        self._cache.clear()
        self._ready.clear()

    def loaded_paths(self) -> list[str]:
        return sorted(self._ready)

    def _read(self, keys: list[tuple[str, torch.device, torch.dtype]]) -> None:
        """Read tensors into the cache, keyed by (checkpoint name, device, dtype): tied weights
        (embeddings and lm_head) are read once."""
        by_target: dict[tuple[torch.device, torch.dtype], list[str]] = defaultdict(list)
        for name, device, dtype in keys:
            by_target[(device, dtype)].append(name)
        for (device, dtype), names in by_target.items():
            tensors = self.checkpoint.read(dict.fromkeys(names, (device, dtype)))
            for name, tensor in tensors.items():
                self._cache[(name, device, dtype)] = tensor
                self.loaded[name] += 1

    def _match_checkpoint_names(self) -> dict[str, str]:
        """Parameter name (every alias of tied parameters) -> the checkpoint tensor holding it."""
        available = set(self.checkpoint.weight_map)
        aliases: dict[int, list[str]] = defaultdict(list)
        for name, param in self.skeleton.named_parameters(remove_duplicate=False):
            aliases[id(param)].append(name)
        prefix = getattr(self.skeleton, "base_model_prefix", "") + "."
        out, missing = {}, []
        for names in aliases.values():
            candidates = names + [n.removeprefix(prefix) for n in names if n.startswith(prefix)]
            found = next((c for c in candidates if c in available), None)
            if found is None:
                missing.append(names[0])
            else:
                out.update(dict.fromkeys(names, found))
        if missing:
            raise CheckpointLayoutError(
                f"donor checkpoint {self.folder} lacks tensors that its config.json implies: {missing[:6]}"
                f"{f' (and {len(missing) - 6} more)' if len(missing) > 6 else ''}; it was saved from another "
                "architecture or is incomplete"
            )
        return out
