"""Where a recipient module computes, also when accelerate spreads or offloads the model.

A model loaded with `device_map=...` keeps offloaded weights on the meta device and lets
accelerate's hooks move them to an execution device for each forward. A donor module has to
compute on that execution device, not where the recipient's parameters happen to sit.
"""

from __future__ import annotations

import torch
from torch import nn


def _hook_device(module: nn.Module) -> torch.device | None:
    hook = getattr(module, "_hf_hook", None)
    hooks = getattr(hook, "hooks", None) or ([hook] if hook is not None else [])  # SequentialHook or one hook
    for h in hooks:
        device = getattr(h, "execution_device", None)
        if device is not None:
            return torch.device(device if not isinstance(device, int) else f"cuda:{device}")
    return None


def execution_device(model: nn.Module, path: str) -> torch.device:
    """The device on which the module at `path` of `model` runs its forward."""
    parts = path.split(".") if path else []
    for depth in range(len(parts), -1, -1):  # the module itself first, then its ancestors
        device = _hook_device(model.get_submodule(".".join(parts[:depth])))
        if device is not None:
            return device
    module = model.get_submodule(path)
    for tensor in [*module.parameters(), *module.buffers(), *model.parameters()]:
        if tensor.device.type != "meta":
            return tensor.device
    return torch.device("cpu")
