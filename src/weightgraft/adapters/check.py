"""`check_adapter`: one call that tells a user whether the adapter they registered fits their model
(the checks are `fit.py`'s; here the default adapter is looked up, which inference cannot do)."""

from __future__ import annotations

from torch import nn

from weightgraft.adapters.base import Adapter
from weightgraft.adapters.fit import AdapterError, check_fit
from weightgraft.adapters.lookup import adapter_for

__all__ = ["AdapterError", "check_adapter"]


def check_adapter(model: nn.Module, adapter: Adapter | None = None) -> None:
    """Raise `AdapterError` naming every way `adapter` does not fit `model`; return None if it fits.

    Args:
        model: the causal LM the adapter is for, with real weights (not on the meta device): a
            probe forward pass on one row of three tokens runs on it, in eval mode and without
            gradients (its training mode is restored afterwards).
        adapter: the adapter to check; default `adapter_for(model)`: the registered one for
            `model.config.model_type`, else the one inferred from the model.

    Returns:
        None when the adapter fits.

    Raises:
        AdapterError: every problem, numbered, with its fix.
        AdapterError: no adapter given and none can be inferred (the reason, in one line).

    Checked: `layers` is a list of decoder blocks; every path in `model_level` and, in every block,
    `per_layer` names a module of the model; every parameter belongs to exactly one named module
    (one the `all` group grafts; tied weights count once per name); every fused module's split rule
    gives each of its output features to exactly one part, and each part to a component; every
    named module runs in the forward pass and keeps batch and sequence axes, as `[batch, seq, ...]`
    or at the axis `seq_dims` declares (or, for a "flat" call form, the tokens as its first axis);
    every named module, called on some rows exactly as the engine calls a donor's module there
    (`call_forms`), runs and gives its own output at those rows. Raises `AdapterError` (from
    `adapter_for`) when no adapter is given and none can be inferred.
    """
    check_fit(model, adapter_for(model) if adapter is None else adapter)
