"""`adapter_for`: the registered adapter when one fits, else one inferred from the model itself.

Registered adapters are the fast path: no probe runs for a registered `model_type`. Any other
model is probed (`infer.py`); when the table found equals a registered adapter's (a Llama under
another name), that adapter is used, recorded as an alias.
"""

from __future__ import annotations

import copy
import json

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PretrainedConfig

from weightgraft.adapters.base import Adapter, model_type_of, registered_adapter, registered_adapters
from weightgraft.adapters.fit import AdapterError
from weightgraft.adapters.infer import as_alias, infer_adapter, model_fingerprint, same_table

# Adapters inferred in this process, by model_type, for callers that only know the type (a run's
# plan reads it from a config); a type seen with two different tables is not answered by type.
_BY_TYPE: dict[str, list[Adapter]] = {}
_FROM_CONFIG: dict[str, Adapter] = {}


def adapter_for(model: nn.Module | PretrainedConfig | str) -> Adapter:
    """The adapter that says where each canonical component of `model` lives.

    Args:
        model: a causal LM with weights (probed when no adapter is registered for its type), its
            config (an unregistered type is probed on a two-block copy built from the config with
            random weights), or a model_type string (registered types, or types already inferred
            in this process).

    Returns:
        The registered adapter for `config.model_type`; else a registered adapter whose table
        the model matches (`origin` "alias of T"); else the inferred one (`origin` "inferred").

    Raises:
        AdapterError: the model cannot be described (the message names the parameters or
            structure no component takes); or only a model_type string was given for a type that
            is neither registered nor inferred yet.
    """
    found = registered_adapter(model)
    if found is not None:
        return found
    model_type = model_type_of(model)
    if isinstance(model, str):
        known = _BY_TYPE.get(model, [])
        if len(known) == 1:
            return known[0]
        raise AdapterError(
            f"no weightgraft adapter registered for model_type {model!r}; pass the model (or its config) so "
            "that weightgraft infers one, or register an Adapter (README, 'Adding an architecture')"
        )
    adapter = _from_config(model) if isinstance(model, PretrainedConfig) else _inferred_or_alias(model)
    known = _BY_TYPE.setdefault(model_type, [])
    text = model.get_text_config() if isinstance(model, PretrainedConfig) else model.config.get_text_config()
    if not any(same_table(a, adapter, text) for a in known):
        known.append(adapter)
    return adapter


def _inferred_or_alias(model: nn.Module) -> Adapter:
    inferred = infer_adapter(model)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for registered in registered_adapters():
        if same_table(inferred, registered, config):
            return as_alias(registered, inferred.model_types[0])
    return inferred


def _from_config(config: PretrainedConfig) -> Adapter:
    """Infer on a copy of the architecture with two blocks and random weights (the modules'
    widths and head counts kept, so fused layouts are the real model's)."""
    small = copy.deepcopy(config)
    text = small.get_text_config()
    blocks = min(int(getattr(text, "num_hidden_layers", 2) or 2), 2)
    text.num_hidden_layers = blocks
    if isinstance(getattr(text, "layer_types", None), list):
        text.layer_types = text.layer_types[:blocks]
    key = model_fingerprint_of_config(small)
    if key not in _FROM_CONFIG:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            try:
                skeleton = AutoModelForCausalLM.from_config(small, trust_remote_code=False)
            except Exception as error:  # noqa: BLE001  any failure to build is the user's answer
                raise AdapterError(
                    f"cannot build a {config.model_type!r} model from its config to infer its adapter "
                    f"({str(error).splitlines()[0] if str(error) else type(error).__name__}); load the model and "
                    "pass it instead"
                ) from None
        _FROM_CONFIG[key] = _inferred_or_alias(skeleton)
    return _FROM_CONFIG[key]


def model_fingerprint_of_config(config: PretrainedConfig) -> str:
    """The config as the architecture sees it: two finetunes of one model share it."""
    body = {k: v for k, v in config.to_dict().items() if k not in ("_name_or_path", "transformers_version")}
    return f"{config.model_type}|{json.dumps(body, sort_keys=True, default=str)}"


__all__ = ["adapter_for", "model_fingerprint"]
