"""Never run a model folder's own code unless the user asked for it.

A Hugging Face model folder can name Python classes of its own in `auto_map` (in `config.json`
or `tokenizer_config.json`); loading it with `trust_remote_code=True` imports and runs them, and
some transformers versions ask "Do you wish to run the custom code? [y/N]" on a terminal. Every
weightgraft load passes `trust_remote_code` explicitly (False unless the user asked), and every
command checks a folder here first, reading only those two JSON files, so that such a folder is
refused with one line naming the option, before anything loads and without a question.
"""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub import try_to_load_from_cache

from weightgraft.errors import UserError

CODE_FILES = ("config.json", "tokenizer_config.json")


def local_folder(name_or_path: str | Path) -> Path | None:
    """The folder of a local model, or of a hub id in the local Hugging Face cache; None otherwise."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    try:
        cached = try_to_load_from_cache(str(name_or_path), "config.json")
    except Exception:  # noqa: BLE001 - not a valid hub id: nothing cached to read
        return None
    return Path(cached).parent if isinstance(cached, str) else None


def custom_code(name_or_path: str | Path) -> list[str]:
    """The `auto_map` entries ("FILE: Auto -> module.Class") of a model folder, if any."""
    folder = local_folder(name_or_path)
    if folder is None:
        return []
    found = []
    for name in CODE_FILES:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a missing or damaged file is reported by the loader's own checks
        auto_map = data.get("auto_map") if isinstance(data, dict) else None
        if auto_map:
            entries = auto_map.items() if isinstance(auto_map, dict) else [("auto_map", auto_map)]
            found += [f"{name} auto_map: {key} -> {value}" for key, value in entries]
    return found


def refuse_remote_code(name_or_path: str | Path, trust_remote_code: bool, field: str, how_to_allow: str) -> None:
    """Raise a one-line UserError when the model asks to run its own code and the user did not
    allow it. `how_to_allow`: the option or config field that allows it (for the message)."""
    if trust_remote_code:
        return
    found = custom_code(name_or_path)
    if found:
        raise UserError(
            f"{field}: {name_or_path} asks to run its own Python code ({found[0]}), which weightgraft "
            f"does not run unless you allow it: {how_to_allow}, only if you trust that code"
        )
