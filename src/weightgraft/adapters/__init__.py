"""Architecture adapters. Importing this package registers every shipped architecture."""

from weightgraft.adapters import gemma2, gpt2, gpt_neox, llama, olmo2, phi3  # noqa: F401  (registration)
from weightgraft.adapters.base import (
    Adapter,
    Part,
    adapter_for,
    contiguous_split,
    per_head_interleaved_split,
    register_adapter,
    supported_model_types,
)

__all__ = [
    "Adapter",
    "Part",
    "adapter_for",
    "contiguous_split",
    "per_head_interleaved_split",
    "register_adapter",
    "supported_model_types",
]
