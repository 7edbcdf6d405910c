"""weightgraft: dynamic weight grafting for transformer language models."""

from weightgraft.adapters import Adapter, Part, adapter_for, register_adapter, supported_model_types
from weightgraft.engine import Graft, Grafter

__version__ = "0.1.0"

__all__ = ["Adapter", "Graft", "Grafter", "Part", "adapter_for", "register_adapter", "supported_model_types"]
