"""Architecture adapters. Importing this package registers every shipped architecture."""

from weightgraft.adapters import gemma2, gpt2, gpt_neox, llama, moe, olmo2, phi3  # noqa: F401  (registration)
from weightgraft.adapters.base import (
    Adapter,
    Part,
    adapter_for,
    contiguous_split,
    per_head_interleaved_split,
    register_adapter,
    supported_model_types,
)
from weightgraft.adapters.check import AdapterError, check_adapter

__all__ = [
    "Adapter",
    "AdapterError",
    "Part",
    "adapter_for",
    "check_adapter",
    "contiguous_split",
    "per_head_interleaved_split",
    "register_adapter",
    "supported_model_types",
]
