"""Which of a model's parameters an adapter's components own.

The Grafter refuses an adapter that leaves a parameter uncovered (so that `all` means every
parameter), and `check_adapter` reports it with the adapter's other faults; both read it here.
"""

from __future__ import annotations

from torch import nn

from weightgraft.adapters.base import Adapter, chain_of, module_path


def adapter_module_paths(model: nn.Module, adapter: Adapter) -> list[str]:
    """Every module the adapter names, across all layers."""
    paths = [path for entry in adapter.model_level.values() for path in chain_of(entry)]
    num_layers = len(adapter.decoder_layers(model))
    for entry in adapter.per_layer.values():
        for ref in chain_of(entry):
            paths += [f"{adapter.layers}.{i}.{module_path(ref)}" for i in range(num_layers)]
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
