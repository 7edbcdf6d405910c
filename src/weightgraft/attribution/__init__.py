"""Graft attribution and minimal graft search: which cells (position x layer x component) carry
a finetuning effect, and the smallest graft that carries most of it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Names resolve on first use, so that reading a run config (which knows the `localize`
# experiment) does not import torch.
_EXPORTS = {
    "Attribution": "weightgraft.attribution.attribute",
    "attribute": "weightgraft.attribution.attribute",
    "position_roles": "weightgraft.attribution.attribute",
    "exact_cell_effects": "weightgraft.attribution.exact",
    "spearman": "weightgraft.attribution.exact",
    "Example": "weightgraft.attribution.localize",
    "LocalizeResult": "weightgraft.attribution.localize",
    "encode_examples": "weightgraft.attribution.localize",
    "localize": "weightgraft.attribution.localize",
    "cell_agreement": "weightgraft.attribution.agreement",
}

__all__ = ["Attribution", "Example", "LocalizeResult", "attribute", "cell_agreement", "encode_examples",
           "exact_cell_effects", "localize", "position_roles", "spearman"]

if TYPE_CHECKING:
    from weightgraft.attribution.agreement import cell_agreement
    from weightgraft.attribution.attribute import Attribution, attribute, position_roles
    from weightgraft.attribution.exact import exact_cell_effects, spearman
    from weightgraft.attribution.localize import Example, LocalizeResult, encode_examples, localize


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'weightgraft.attribution' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
