"""A probe of one decoder block: call it again and again on the arguments the model gave it, with
chosen module outputs or inputs nudged, and see what every module inside received and returned.

Adapter inference (`infer.py`) decides each module's role from what a nudge does downstream, so
it needs the block's own call (hidden states, masks, rotary tables) and a record of every
submodule's first tensor in and out; this file provides both and decides nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

# Tokens in the probe row. Odd and unlike any head count or width of a real model, so that the
# sequence axis of a tensor is the one axis of this size.
PROBE_TOKENS = 11

Edit = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Seen:
    """What one module received and returned on its first call in a block call."""

    calls: int
    input: torch.Tensor | None
    output: torch.Tensor | None
    order: int = 0  # when it first returned, counted over the block call


def first_tensor(value: object) -> torch.Tensor | None:
    """The tensor a module's output stands for: itself, or the first tensor of a tuple."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in value if isinstance(v, torch.Tensor)), None)
    return None


def primary_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The input a module transforms: its first tensor argument, or `hidden_states`."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    if isinstance(kwargs.get("hidden_states"), torch.Tensor):
        return kwargs["hidden_states"]
    return next((v for v in list(args) + list(kwargs.values()) if isinstance(v, torch.Tensor)), None)


def _replace_primary(args: tuple, kwargs: dict, new: torch.Tensor) -> tuple[tuple, dict]:
    if args and isinstance(args[0], torch.Tensor):
        return (new, *args[1:]), kwargs
    if isinstance(kwargs.get("hidden_states"), torch.Tensor):
        return args, {**kwargs, "hidden_states": new}
    raise ValueError("no tensor input to edit")


def _replace_output(output: object, new: torch.Tensor) -> object:
    if isinstance(output, torch.Tensor):
        return new
    items = list(output)
    index = next(i for i, v in enumerate(items) if isinstance(v, torch.Tensor))
    items[index] = new
    return type(output)(items) if isinstance(output, tuple) else items


class BlockProbe:
    """Block `index` of `layers` (a ModuleList inside `model`), called as the model calls it."""

    def __init__(self, model: nn.Module, layers: nn.ModuleList, index: int = 0):
        self.block = layers[index]
        self.tokens = PROBE_TOKENS
        self.args, self.kwargs, self.calls = self._capture(model, layers, index)
        self.paths = [name for name, _ in self.block.named_modules() if name]
        self.baseline = self.run()

    @torch.no_grad()
    def _capture(self, model: nn.Module, layers: nn.ModuleList, index: int) -> tuple[tuple, dict, list[int]]:
        """The arguments block `index` gets in a forward pass of one row, and how many times each
        block ran (a block run twice, or not at all, is not a stack the engine can graft)."""
        seen: dict[str, tuple] = {}
        calls = [0] * len(layers)

        def count(i: int):
            def hook(module, args, kwargs):
                calls[i] += 1
                if i == index and "call" not in seen:
                    seen["call"] = (args, dict(kwargs))

            return hook

        handles = [block.register_forward_pre_hook(count(i), with_kwargs=True) for i, block in enumerate(layers)]
        config = getattr(model, "config", None)
        vocab = int(getattr(config.get_text_config() if config is not None else None, "vocab_size", 0) or 64)
        device = next(model.parameters()).device
        ids = (torch.arange(self.tokens, device=device) * 7 + 3) % max(vocab - 1, 1) + 1
        try:
            model(input_ids=ids[None], attention_mask=torch.ones_like(ids)[None], use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
        if "call" not in seen:
            raise RuntimeError("the probe forward pass never called the decoder block")
        args, kwargs = seen["call"]
        kwargs = {k: v for k, v in kwargs.items() if k not in ("past_key_values", "cache", "past_key_value")}
        return args, kwargs, calls

    @torch.no_grad()
    def run(self, outputs: dict[str, Edit] | None = None, inputs: dict[str, Edit] | None = None) -> dict[str, Seen]:
        """Call the block once with `outputs` (path -> edit of that module's output tensor) and
        `inputs` (path -> edit of its input) in place; what every submodule saw on its first call."""
        outputs, inputs = outputs or {}, inputs or {}
        seen: dict[str, Seen] = {}
        handles = []

        def pre(path: str):
            def hook(module, args, kwargs):
                if path in inputs and path not in seen:
                    tensor = primary_input(args, kwargs)
                    return _replace_primary(args, kwargs, inputs[path](tensor))
                return None

            return hook

        def post(path: str):
            def hook(module, args, kwargs, output):
                result = output
                if path in outputs and path not in seen:
                    result = _replace_output(output, outputs[path](first_tensor(output)))
                if path in seen:
                    seen[path].calls += 1
                else:
                    seen[path] = Seen(1, primary_input(args, kwargs), first_tensor(result), len(seen))
                return result if result is not output else None

            return hook

        modules = dict(self.block.named_modules())
        try:
            for path in self.paths:
                handles.append(modules[path].register_forward_pre_hook(pre(path), with_kwargs=True))
                handles.append(modules[path].register_forward_hook(post(path), with_kwargs=True))
            out = self.block(*self.args, **self.kwargs)
        finally:
            for handle in handles:
                handle.remove()
        seen[""] = Seen(1, primary_input(self.args, self.kwargs), first_tensor(out))
        return seen


def seq_axis(tensor: torch.Tensor, tokens: int = PROBE_TOKENS) -> int | None:
    """The one axis of `tensor` that has the probe's token count; None when none or several do."""
    axes = [i for i, size in enumerate(tensor.shape) if size == tokens]
    return axes[0] if len(axes) == 1 else None


def changed_positions(before: torch.Tensor, after: torch.Tensor, axis: int) -> set[int]:
    """Token positions (along `axis`) where two tensors differ beyond float noise."""
    a, b = before.float().movedim(axis, 0), after.float().movedim(axis, 0)
    scale = a.abs().amax().clamp(min=1e-6)
    diff = (a - b).abs().reshape(a.shape[0], -1).amax(-1)
    return {i for i, d in enumerate(diff.tolist()) if d > 1e-5 * scale}


def nudge(tensor: torch.Tensor, position: int, axis: int, columns: torch.Tensor | None = None, times: float = 1.0):
    """`tensor` plus `times` x a fixed random change at one position (optionally only in some of
    its last-axis columns), the change's size set by the tensor's own spread."""
    generator = torch.Generator().manual_seed(1234 + position)
    row = tensor.movedim(axis, 0)[position]
    change = torch.randn(row.shape, generator=generator, dtype=torch.float32).to(tensor.device, tensor.dtype)
    change = change * (row.float().std().clamp(min=1e-2) * 0.5).to(tensor.dtype)
    if columns is not None:
        keep = torch.zeros(row.shape[-1], dtype=torch.bool, device=tensor.device)
        keep[columns.to(tensor.device)] = True
        change = change * keep
    out = tensor.clone()
    out.movedim(axis, 0)[position] += times * change
    return out


def is_linear_in(responses: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> bool | None:
    """Given f(x), f(x + d), f(x + 2d): True when f moves exactly linearly along d, False when
    not, None when the change did not reach f."""
    base, once, twice = (t.double() for t in responses)
    first, second = once - base, twice - base
    size = first.abs().amax()
    if size <= 1e-6 * base.abs().amax().clamp(min=1e-6):
        return None
    # Exactly linear up to float rounding (seen: below 1e-5), or not: a softmax or an activation
    # bends by far more at the nudge's size.
    return bool((second - 2 * first).abs().amax() / (2 * size) < 1e-3)
