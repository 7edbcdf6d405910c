"""Loading the models a run names (hub id or local path) and fingerprinting them for provenance.

A fingerprint is a sha256 over every byte of the weight, config and tokenizer files, so that a
change anywhere in a model makes a rerun recompute what depends on it. Hashing gigabytes takes a
while, so each file's hash is kept in a cache keyed by (path, size, mtime, ctime, inode): a
rerun on unchanged files hashes nothing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import cached_file
from transformers.utils import logging as hf_logging

from weightgraft.atomic import write_text_atomic
from weightgraft.errors import UserError
from weightgraft.folder_ownership import check_whole
from weightgraft.pretrained import is_pretrained_name, resolve_pretrained
from weightgraft.recorded import check_recorded_files
from weightgraft.runtime import home, sha256_file

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
FINGERPRINTED = ("*.safetensors", "*.bin", "config.json", "tokenizer.json")
_SHOWN_KEYS = 8  # keys listed in a missing/unexpected-tensor error


def model_dir(name_or_path: str) -> Path | None:
    """The local folder holding a model: the path itself, a real model's converted folder (a
    catalogue name or a `.gguf` file, converted on first use), or a hub id's cached snapshot."""
    if is_pretrained_name(name_or_path):
        return resolve_pretrained(name_or_path)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path.resolve()
    if looks_like_path(name_or_path):
        return None
    try:
        config = cached_file(name_or_path, "config.json", local_files_only=True)
        return Path(config).parent if config else None
    except Exception:
        return None


def context_length(name_or_path: str) -> int | None:
    """The most tokens the model takes (config.json's n_positions or max_position_embeddings,
    of its text config), read without loading it; None when unknown."""
    folder = model_dir(name_or_path)
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8")) if folder else {}
    except (OSError, ValueError):
        return None
    if isinstance(config.get("text_config"), dict):
        config = {**config, **config["text_config"]}
    for name in ("n_positions", "max_position_embeddings", "n_ctx"):
        if isinstance(config.get(name), int) and config[name] > 0:
            return config[name]
    return None


def looks_like_path(name: str) -> bool:
    """A hub id is `name` or `org/name`; anything else (or anything on disk) is a path."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name or Path(name).expanduser().exists()


# ---- fingerprints ------------------------------------------------------------------------
def hash_cache_file() -> Path:
    return home() / "file-hashes.json"


def _file_key(path: Path) -> dict:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino}


def _read_cache() -> dict:
    try:
        cache = json.loads(hash_cache_file().read_text())
        return cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        return {}  # no cache yet, or a damaged one: hash again


def fingerprint_files(paths: list[Path]) -> dict[Path, str]:
    """Each file's full sha256, from the cache when the file's (path, size, mtime, ctime,
    inode) is unchanged since it was hashed, else computed and cached."""
    cache = _read_cache()
    out, changed = {}, False
    for path in paths:
        name, key = str(Path(path).resolve()), _file_key(path)
        entry = cache.get(name)
        if isinstance(entry, dict) and {k: entry.get(k) for k in key} == key and "sha256" in entry:
            out[path] = entry["sha256"]
            continue
        out[path] = sha256_file(path)
        cache[name] = dict(key, sha256=out[path])
        changed = True
    if changed:
        cache = {name: entry for name, entry in cache.items() if Path(name).exists()}
        try:
            write_text_atomic(hash_cache_file(), json.dumps(cache, indent=1, sort_keys=True))
        except OSError:
            pass  # a read-only cache folder only costs hashing again next time
    return out


def model_file_hashes(name_or_path: str) -> dict[str, str]:
    """{file name: sha256} of a model's weight, config and tokenizer files (empty if not local)."""
    folder = model_dir(name_or_path)
    if folder is None:
        return {}
    paths = sorted({p for pattern in FINGERPRINTED for p in folder.glob(pattern)})
    hashes = fingerprint_files(paths)
    return {p.name: hashes[p] for p in paths}


def fingerprint_model(name_or_path: str) -> str:
    """sha256 over the file names and full sha256s of the weight, config and tokenizer files."""
    files = model_file_hashes(name_or_path)
    if not files:
        return "unknown"
    digest = hashlib.sha256()
    for name, sha in files.items():
        digest.update(name.encode())
        digest.update(sha.encode())
    return digest.hexdigest()


# ---- checks and loading ------------------------------------------------------------------
def check_model_files(name_or_path: str, field: str = "model") -> Path | None:
    """Fail with a plain message, before anything loads, when `name_or_path` is not a usable
    model: a missing path, a folder without config.json, only pickled `.bin` weights, or a
    damaged safetensors header. Returns the local folder (None for a hub id not cached)."""
    folder = model_dir(name_or_path)
    path = Path(name_or_path).expanduser()
    if folder is None:
        if path.is_file():
            raise UserError(
                f"{field}: {name_or_path} is a file; give the folder that holds "
                "config.json and model.safetensors (as save_pretrained writes it)"
            )
        if looks_like_path(name_or_path):
            raise UserError(
                f"{field}: model path {name_or_path} does not exist; fix the path "
                "(relative paths are read from the config file's folder)"
            )
        return None  # a hub id that is not cached: from_pretrained says whether it can be had
    check_whole(folder)
    check_recorded_files(folder, FINGERPRINTED)
    if not (folder / "config.json").is_file():
        raise UserError(
            f"{field}: {folder} is not a model folder (no config.json); give the "
            "folder save_pretrained wrote, with config.json and model.safetensors"
        )
    shards = sorted(folder.glob("*.safetensors"))
    if not shards:
        if list(folder.glob("*.bin")) or list(folder.glob("*.pt")) or list(folder.glob("*.pth")):
            raise UserError(
                f"{field}: {folder} has only pickled weights (.bin/.pt), which weightgraft does not "
                "load because unpickling can run code; re-save the model as safetensors: "
                "model.save_pretrained(DIR, safe_serialization=True)"
            )
        raise UserError(
            f"{field}: {folder} has no *.safetensors weights; save the model with "
            "save_pretrained(DIR, safe_serialization=True)"
        )
    for shard in shards:
        try:
            with safe_open(str(shard), framework="pt") as handle:
                handle.keys()
        except (SafetensorError, OSError) as err:
            raise UserError(f"{field}: {shard} is damaged ({err}); save or download the model again") from err
    return folder


def _key_problems(info: dict) -> list[str]:
    problems = []
    for label, key in (
        ("missing", "missing_keys"),
        ("unexpected", "unexpected_keys"),
        ("wrong-shape", "mismatched_keys"),
    ):
        names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get(key) or [])
        if names:
            more = f" and {len(names) - _SHOWN_KEYS} more" if len(names) > _SHOWN_KEYS else ""
            problems.append(f"{len(names)} {label} tensor(s) {', '.join(names[:_SHOWN_KEYS])}{more}")
    return problems


def load_model(name_or_path: str, device: str, dtype: str, trust_remote_code: bool = False, field: str = "model"):
    """A causal LM in eval mode on `device` in `dtype`. Every tensor the architecture needs must
    come from the checkpoint, and every tensor of the checkpoint must be used: a missing one
    would otherwise be randomly initialised without a word."""
    folder = check_model_files(name_or_path, field)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # its load report would come before our one-line error
    hf_logging.disable_progress_bar()
    try:
        # safetensors only: a pickled checkpoint can run code when loaded.
        model, info = AutoModelForCausalLM.from_pretrained(
            str(folder) if folder is not None else name_or_path,
            dtype=DTYPES[dtype],
            trust_remote_code=trust_remote_code,
            use_safetensors=True,
            output_loading_info=True,
            ignore_mismatched_sizes=True,
        )
    except SafetensorError as err:
        raise UserError(
            f"{field}: the safetensors weights of {name_or_path} are damaged ({err}); save or download the model again"
        ) from err
    except OSError as err:
        raise UserError(
            f"{field}: cannot load model {name_or_path!r} ({str(err).splitlines()[0]}); give a "
            "local folder saved with save_pretrained (safetensors), or a hub id in the local "
            "Hugging Face cache"
        ) from err
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    problems = _key_problems(info)
    if problems:
        raise UserError(
            f"{field}: the checkpoint of {name_or_path} does not match its config.json: "
            f"{'; '.join(problems)}; save the model again with save_pretrained, or "
            "fix config.json"
        )
    return model.to(device).eval()


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False, field: str = "model"):
    folder = model_dir(name_or_path)
    if folder is not None:
        check_whole(folder)
    try:
        return AutoTokenizer.from_pretrained(
            str(folder) if folder is not None else name_or_path, trust_remote_code=trust_remote_code
        )
    except (OSError, ValueError) as err:
        raise UserError(
            f"{field}: no usable tokenizer in {name_or_path} "
            f"({str(err).splitlines()[0]}); save the tokenizer beside the model with "
            "tokenizer.save_pretrained(DIR)"
        ) from err


def vocab_fingerprint(tokenizer) -> str:
    items = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(repr(items).encode()).hexdigest()
