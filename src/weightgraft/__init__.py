"""weightgraft: dynamic weight grafting for transformer language models."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from weightgraft._version import __version__ as __version__

# Names resolve on first use, so that the data-only command-line paths start without torch.
_EXPORTS = {
    "Graft": "weightgraft.engine.graft",
    "Grafter": "weightgraft.engine.grafter",
    "Prompt": "weightgraft.data.prompt",
    "Adapter": "weightgraft.adapters",
    "Part": "weightgraft.adapters",
    "adapter_for": "weightgraft.adapters",
    "check_adapter": "weightgraft.adapters",
    "register_adapter": "weightgraft.adapters",
    "supported_model_types": "weightgraft.adapters",
    "attribute": "weightgraft.attribution",
    "localize": "weightgraft.attribution",
}

__all__ = [
    "Adapter",
    "Graft",
    "Grafter",
    "Part",
    "Prompt",
    "adapter_for",
    "attribute",
    "check_adapter",
    "localize",
    "register_adapter",
    "supported_model_types",
]

if TYPE_CHECKING:
    from weightgraft.adapters import (
        Adapter,
        Part,
        adapter_for,
        check_adapter,
        register_adapter,
        supported_model_types,
    )
    from weightgraft.attribution import attribute, localize
    from weightgraft.data.prompt import Prompt
    from weightgraft.engine.graft import Graft
    from weightgraft.engine.grafter import Grafter


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'weightgraft' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
