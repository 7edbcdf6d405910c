"""One GGUF file into a weightgraft model folder: float32 safetensors, config and tokenizer.

transformers dequantizes a GGUF on every load (Gemma-3-270M: minutes on two cores) and refuses
to save a model it loaded from one. So the weights are moved once into a fresh model built from
the same config (less its quantization entry), which saves like any other; later loads read the
safetensors in seconds. The folder is written whole or not at all (`atomic_directory`) and ends
with a record of every file's size and sha256, which `resolve_name.py` checks before each use.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from unittest.mock import patch

import torch
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from weightgraft._version import __version__
from weightgraft.atomic import write_json
from weightgraft.folder_install import atomic_directory
from weightgraft.runtime import file_facts, sha256_file

CONVERSION_RECORD = "weightgraft-conversion.json"
CONVERTER_VERSION = 1  # bump when the folder's contents would change for the same GGUF


def load_gguf(gguf: Path):
    """transformers' own load of a GGUF file: (model in float32, eval mode; tokenizer)."""
    folder, name = str(gguf.parent), gguf.name
    with _gguf_bar_as_transformers_bars():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(
            folder, gguf_file=name, dtype=torch.float32, trust_remote_code=False
        )
    return model.eval(), tokenizer


@contextmanager
def _gguf_bar_as_transformers_bars():
    """transformers' GGUF reader draws its bar with tqdm directly, past its own progress switch;
    while that switch is off (a command run with --no-progress), the reader's bar is off too."""
    if hf_logging.is_progress_bar_enabled():
        yield
        return
    with patch.object(gguf_utils, "tqdm", partial(gguf_utils.tqdm, disable=True)):
        yield


def _serialisable_copy(model):
    """The same weights in a model that `save_pretrained` accepts (no GGUF quantizer attached)."""
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32, trust_remote_code=False)
    fresh.load_state_dict(model.state_dict(), strict=True)
    if getattr(config, "tie_word_embeddings", False):
        fresh.tie_weights()
    return fresh.eval()


def folder_facts(folder: Path) -> dict[str, dict]:
    """{name: size, mtime and sha256} of every file in `folder` but the record itself."""
    return {p.name: file_facts(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != CONVERSION_RECORD}


def convert_gguf(gguf: Path, final: Path, source: dict) -> Path:
    """Write `final` from `gguf`; `source` (name, package, version, terms) goes into the record."""
    start = time.time()
    with atomic_directory(final, overwrite=True) as tmp:
        model, tokenizer = load_gguf(gguf)
        _serialisable_copy(model).save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        record = {
            "converter": CONVERTER_VERSION,
            "weightgraft": __version__,
            "source": dict(source, gguf_file=gguf.name, gguf_sha256=sha256_file(gguf)),
            "seconds": round(time.time() - start, 1),
        }
        record["files"] = folder_facts(tmp)  # mtimes survive the folder's rename into place
        write_json(tmp / CONVERSION_RECORD, record)
    return final


def read_record(folder: Path) -> dict | None:
    try:
        record = json.loads((folder / CONVERSION_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("files"), dict) else None
