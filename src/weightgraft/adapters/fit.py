"""Whether an adapter fits its model: every rule the engine relies on, checked on the model itself.

The engine trusts its adapter: a wrong path fails deep inside a run, a missed parameter makes
`all` mean less than everything, and a split that does not add up grafts the wrong columns. This
check runs every rule the engine relies on, on the user's own model, and reports every fault at
once, each with its fix, so that the adapter is right before the first graft. `check.check_adapter` is the public call;
inference (`infer.py`) checks what it finds here.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from weightgraft.adapters.base import Adapter, Part, chain_of, module_path
from weightgraft.adapters.call_check import call_problems
from weightgraft.adapters.coverage import adapter_module_paths, uncovered_parameters
from weightgraft.errors import UserError

# Tokens of the probe forward: one row of three, so that batch (1) and sequence (3) axes differ.
PROBE_LENGTH = 3


class AdapterError(UserError, ValueError):
    """An adapter that does not fit its model; the message lists every problem and its fix."""


def check_fit(model: nn.Module, adapter: Adapter) -> None:
    """Raise `AdapterError` naming every way `adapter` does not fit `model` (`check_adapter`'s
    checks, on a given adapter: inference checks what it finds here, before any lookup)."""
    name = adapter.model_types[0]
    problems = _structure_problems(model, adapter)
    if not problems:
        problems = _coverage_problems(model, adapter) + _forward_problems(model, adapter)
    if problems:
        numbered = "; ".join(f"({i}) {p}" for i, p in enumerate(problems, 1))
        raise AdapterError(f"the {name} adapter does not fit this model ({len(problems)} problem(s)): {numbered}")


def _structure_problems(model: nn.Module, adapter: Adapter) -> list[str]:
    """Paths that name no module; without them the other checks cannot run."""
    try:
        layers = adapter.decoder_layers(model)
    except AttributeError:
        return [f"layers={adapter.layers!r} is not a module of this model; give the path of its decoder blocks"]
    if not isinstance(layers, (nn.ModuleList, nn.Sequential)):
        return [
            f"layers={adapter.layers!r} is a {type(layers).__name__}, not a list of decoder blocks; "
            "give the path of the nn.ModuleList that holds them"
        ]
    modules = dict(model.named_modules())
    problems = [
        f"model_level[{comp!r}]={path!r} is not a module of this model; fix the path (see model.named_modules())"
        for comp, entry in adapter.model_level.items()
        for path in chain_of(entry)
        if path not in modules
    ]
    for comp, local in [(c, module_path(ref)) for c, entry in adapter.per_layer.items() for ref in chain_of(entry)]:
        missing = [i for i in range(len(layers)) if f"{adapter.layers}.{i}.{local}" not in modules]
        if missing:
            where = "any decoder block" if len(missing) == len(layers) else f"decoder blocks {missing}"
            problems.append(
                f"per_layer[{comp!r}]={local!r} is not a module of {where}; give its path inside a block "
                f"(relative to {adapter.layers}.N)"
            )
    return problems


def _coverage_problems(model: nn.Module, adapter: Adapter) -> list[str]:
    """Parameters no component owns, and parameters two named modules (one inside the other) own."""
    problems = []
    uncovered = uncovered_parameters(model, adapter)
    if uncovered:
        more = f" and {len(uncovered) - 8} more" if len(uncovered) > 8 else ""
        problems.append(
            f"parameters {uncovered[:8]}{more} belong to no component; add the modules that hold them "
            "to model_level or per_layer so that 'all' grafts every parameter"
        )
    owners = Counter(
        f"{path}.{param_name}"
        for path in adapter_module_paths(model, adapter)
        for param_name, _ in model.get_submodule(path).named_parameters()
    )
    twice = sorted(name for name, count in owners.items() if count > 1)
    if twice:
        problems.append(
            f"parameters {twice[:8]} belong to two components (one module path lies inside another); "
            "name each module once, at the innermost level"
        )
    return problems


def _forward_problems(model: nn.Module, adapter: Adapter) -> list[str]:
    """Run one row of three tokens with a hook on every named module: each must run, keep the
    layout of its call form (`[batch, seq, ...]`, at its declared sequence axis, or flat tokens),
    give its own output when called on rows as the engine calls it, and fused ones must split
    their full width."""
    if any(p.is_meta for p in model.parameters()):
        return ["the model is on the meta device; load it with weights so that a forward pass can run"]
    seen: dict[str, list[str]] = {}  # path -> problems ([] once it ran cleanly)
    widths: dict[str, int] = {}
    layouts = _layouts(model, adapter)
    busy: list[bool] = []  # set while the check itself calls a module: its hooks stay quiet

    def watch(path: str):
        def hook(module: nn.Module, args: tuple, kwargs: dict, output) -> None:
            if busy or path in seen:
                return
            form, dim = layouts.get(path, ("rows", 1))
            busy.append(True)
            try:
                seen[path] = call_problems(path, module, form, dim, args, kwargs, output, PROBE_LENGTH)
            finally:
                busy.clear()
            if isinstance(output, torch.Tensor):
                widths[path] = output.shape[-1]

        return hook

    paths = adapter_module_paths(model, adapter)
    handles = [model.get_submodule(p).register_forward_hook(watch(p), with_kwargs=True) for p in paths]
    was_training = model.training
    device = next(model.parameters()).device
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", PROBE_LENGTH) or PROBE_LENGTH)
    ids = (torch.arange(PROBE_LENGTH, device=device) % vocab).unsqueeze(0)
    try:
        model.eval()
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    problems = [
        f"{path!r} does not run in a forward pass; name a module the model calls" for path in paths if path not in seen
    ]
    problems += list(dict.fromkeys(p for path in paths for p in seen.get(path, [])))
    return problems + _split_problems(model, adapter, widths)


def _layouts(model: nn.Module, adapter: Adapter) -> dict[str, tuple[str, int]]:
    """Module path -> (call form, sequence axis), where either is not the default."""
    num_layers = len(adapter.decoder_layers(model))
    locals_ = set(adapter.seq_dims) | set(adapter.call_forms)
    layouts = {
        f"{adapter.layers}.{i}.{local}": (adapter.call_form(local), adapter.seq_dims.get(local, 1))
        for local in locals_
        for i in range(num_layers)
    }
    return layouts | {path: (form, 1) for path, form in adapter.model_call_forms.items()}


def _split_problems(model: nn.Module, adapter: Adapter, widths: dict[str, int]) -> list[str]:
    """Each fused module's parts: a partition of its output features, each part named by a component."""
    problems = []
    for local, rule in adapter.splits.items():
        named = {
            ref.part
            for entry in adapter.per_layer.values()
            for ref in chain_of(entry)
            if isinstance(ref, Part) and ref.module == local
        }
        width = widths.get(f"{adapter.layers}.0.{local}")
        if not named:
            continue  # a rule no component uses grafts nothing; unused, not wrong
        parts = rule(model.config)
        unnamed = sorted(set(parts) - named)
        if unnamed:
            problems.append(
                f"the split of {local!r} gives part(s) {unnamed}, which no component names; add a "
                f"per_layer entry Part({local!r}, ...) for each, or drop them from the rule"
            )
        absent = sorted(named - set(parts))
        if absent:
            problems.append(
                f"components name part(s) {absent} of {local!r}, which its split rule does not give; "
                "make the rule return them"
            )
        if width is None:
            continue
        columns = torch.cat([torch.as_tensor(c).reshape(-1) for c in parts.values()]) if parts else torch.empty(0)
        sizes = {part: int(torch.as_tensor(c).numel()) for part, c in parts.items()}
        if sorted(columns.tolist()) != list(range(width)):
            problems.append(
                f"the split of {local!r} does not give each of its {width} output features to exactly one part "
                f"(parts {sizes}, {int(columns.numel())} features in all); make the parts' indices cover "
                f"0..{width - 1} once"
            )
    return problems
