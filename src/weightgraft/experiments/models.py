"""Loading the models a run names (hub id or local path) and fingerprinting them for provenance."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_BIG = 256 * 2**20  # files above this are fingerprinted by size plus their first and last 16 MiB


def model_dir(name_or_path: str) -> Path | None:
    """The local folder holding a model: the path itself, or a hub id's cached snapshot."""
    path = Path(name_or_path)
    if path.is_dir():
        return path.resolve()
    try:
        from transformers.utils import cached_file

        config = cached_file(name_or_path, "config.json", local_files_only=True)
        return Path(config).parent if config else None
    except Exception:
        return None


def fingerprint_file(path: Path) -> str:
    digest = hashlib.sha256()
    size = path.stat().st_size
    with path.open("rb") as handle:
        if size <= _BIG:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
        else:
            digest.update(f"size={size}".encode())
            digest.update(handle.read(16 * 2**20))
            handle.seek(size - 16 * 2**20)
            digest.update(handle.read())
    return digest.hexdigest()


def fingerprint_model(name_or_path: str) -> str:
    """sha256 over the weight and config files (sampled for files over 256 MiB)."""
    folder = model_dir(name_or_path)
    if folder is None:
        return "unknown"
    digest = hashlib.sha256()
    patterns = ("*.safetensors", "*.bin", "config.json", "tokenizer.json")
    for path in sorted({p for pat in patterns for p in folder.glob(pat)}):
        digest.update(path.name.encode())
        digest.update(fingerprint_file(path).encode())
    return digest.hexdigest()


def load_model(name_or_path: str, device: str, dtype: str, trust_remote_code: bool = False):
    """A causal LM in eval mode on `device` in `dtype`; errors say what to check."""
    from transformers import AutoModelForCausalLM

    try:
        # safetensors only: a pickled checkpoint can run code when loaded.
        model = AutoModelForCausalLM.from_pretrained(
            name_or_path, dtype=DTYPES[dtype], trust_remote_code=trust_remote_code, use_safetensors=True)
    except OSError as err:
        raise FileNotFoundError(
            f"cannot load model {name_or_path!r}: {err}. Give a local folder saved with "
            "save_pretrained (safetensors), or a hub id already in the local cache (no downloads "
            "here); convert a .bin checkpoint with save_pretrained(..., safe_serialization=True).") from err
    return model.to(device).eval()


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)


def vocab_fingerprint(tokenizer) -> str:
    items = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(repr(items).encode()).hexdigest()
