"""Architecture adapters. Importing this package registers every shipped architecture."""

from weightgraft.adapters import gemma2, gpt2, gpt_neox, llama, moe, olmo2, phi3  # noqa: F401  (registration)
from weightgraft.adapters.base import (
    Adapter,
    Part,
    contiguous_split,
    per_head_interleaved_split,
    register_adapter,
    supported_model_types,
)
from weightgraft.adapters.check import AdapterError, check_adapter
from weightgraft.adapters.infer import infer_adapter
from weightgraft.adapters.lookup import adapter_for

__all__ = [
    "Adapter",
    "AdapterError",
    "Part",
    "adapter_for",
    "check_adapter",
    "contiguous_split",
    "infer_adapter",
    "per_head_interleaved_split",
    "register_adapter",
    "supported_model_types",
]
