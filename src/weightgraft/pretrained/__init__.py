"""Real pretrained models by name: `smollm2-135m`, `gemma3-270m`, or any `.gguf` file.

They ship as GGUF files inside registry packages; the first use converts one into weightgraft's
home as safetensors plus tokenizer (`convert.py`), and every later use reads that folder
(`resolve_name.py`). `catalog.py` says which names exist and where their files come from.
"""

from weightgraft.pretrained.catalog import CATALOG, PretrainedModel
from weightgraft.pretrained.resolve_name import as_local, is_pretrained_name, resolve_pretrained

__all__ = ["CATALOG", "PretrainedModel", "as_local", "is_pretrained_name", "resolve_pretrained"]
