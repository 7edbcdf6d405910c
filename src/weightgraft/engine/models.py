"""Checks that two models can be grafted, and that an adapter accounts for every parameter."""

from __future__ import annotations

from torch import nn

from weightgraft.adapters.base import Adapter, Part


def check_compatible(recipient: nn.Module, donor: nn.Module) -> None:
    """Refuse pairs that differ in architecture, parameter names or shapes, device or dtype."""
    r_type = getattr(getattr(recipient, "config", None), "model_type", None)
    d_type = getattr(getattr(donor, "config", None), "model_type", None)
    if r_type is None or d_type is None:
        raise TypeError("recipient and donor must be Hugging Face models with a .config (e.g. AutoModelForCausalLM)")
    if r_type != d_type:
        raise ValueError(f"models differ in architecture: recipient is {r_type!r}, donor is {d_type!r}")
    r_params = {n: p for n, p in recipient.named_parameters()}
    d_params = {n: p for n, p in donor.named_parameters()}
    problems = [f"{n} only in recipient" for n in r_params.keys() - d_params.keys()]
    problems += [f"{n} only in donor" for n in d_params.keys() - r_params.keys()]
    problems += [
        f"{n}: recipient {tuple(p.shape)} vs donor {tuple(d_params[n].shape)}"
        for n, p in r_params.items()
        if n in d_params and p.shape != d_params[n].shape
    ]
    if problems:
        shown = "; ".join(sorted(problems)[:6])
        more = f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""
        raise ValueError(f"models differ in parameters: {shown}{more}. Graft between models of one configuration.")
    r_first, d_first = next(iter(r_params.values())), next(iter(d_params.values()))
    if r_first.device != d_first.device:
        raise ValueError(f"recipient is on {r_first.device} and donor on {d_first.device}; move both to one device")
    if r_first.dtype != d_first.dtype:
        raise ValueError(f"recipient is {r_first.dtype} and donor {d_first.dtype}; cast both to one dtype")


def adapter_module_paths(model: nn.Module, adapter: Adapter) -> list[str]:
    """Every module the adapter names, across all layers."""
    paths = list(adapter.model_level.values())
    num_layers = len(adapter.decoder_layers(model))
    for ref in adapter.per_layer.values():
        local = ref.module if isinstance(ref, Part) else ref
        paths += [f"{adapter.layers}.{i}.{local}" for i in range(num_layers)]
    return list(dict.fromkeys(paths))


def uncovered_parameters(model: nn.Module, adapter: Adapter) -> list[str]:
    """Parameters that no adapter component owns: 'all' would silently miss them."""
    covered: set[int] = set()
    for path in adapter_module_paths(model, adapter):
        try:
            module = model.get_submodule(path)
        except AttributeError as error:
            raise ValueError(f"the {adapter.model_types[0]} adapter names {path!r}, which this model lacks") from error
        covered |= {id(p) for p in module.parameters()}
    return [name for name, p in model.named_parameters() if id(p) not in covered]
