"""A real model's name (or a `.gguf` path) to its converted folder, converting on first use.

The folder's record lists every file with its size, mtime and sha256. A folder is used only when
every listed file is there with its size and its sha256 (hashed on each first use in a process,
whatever the mtime says); anything else (a damaged, truncated or half-deleted folder) is
converted again, with a line saying why, never used.
"""

from __future__ import annotations

import struct
import sys
import tempfile
from pathlib import Path

from weightgraft.errors import UserError, warn
from weightgraft.folder_ownership import IncompleteFolderError, check_whole
from weightgraft.locking import waiting_lock
from weightgraft.pretrained.catalog import CATALOG, PretrainedModel, require_gguf_reader
from weightgraft.pretrained.convert import CONVERTER_VERSION, convert_gguf, read_record
from weightgraft.runtime import file_unchanged, home, sha256_file

_resolved: dict[tuple, Path] = {}  # (name, the GGUF file's stat) -> folder, hashed once per process


def is_pretrained_name(name: str | Path) -> bool:
    """A catalogue name (`smollm2-135m`) or a path ending in `.gguf`."""
    text = str(name)
    return text in CATALOG or text.lower().endswith(".gguf")


def pretrained_home() -> Path:
    return home() / "pretrained"


def intact(folder: Path) -> bool:
    """Every file the record lists is there, of its size and its sha256 (hashed once per process)."""
    record = read_record(folder)
    if record is None or record.get("converter") != CONVERTER_VERSION:
        return False
    try:
        check_whole(folder)
    except IncompleteFolderError:
        return False
    return not damaged_files(folder, record)


def damaged_files(folder: Path, record: dict) -> list[str]:
    """The names the conversion record lists whose file is gone or not the bytes it recorded."""
    return [name for name, facts in record["files"].items() if not file_unchanged(folder / name, facts)]


def say_why_again(folder: Path) -> None:
    """One line saying why a converted folder that exists is converted again."""
    record = read_record(folder)
    if record is not None and record.get("converter") == CONVERTER_VERSION:
        names = damaged_files(folder, record)
        if names:
            warn(f"{folder / names[0]} differs from the sha256 recorded at its conversion (damaged); converting again")


def _gguf_file(name: str) -> Path:
    path = Path(name).expanduser().resolve()
    if not path.is_file():
        raise UserError(f"model {name}: no such GGUF file; fix the path, or name a model: {', '.join(CATALOG)}")
    return path


def _target(name: str) -> tuple[Path, PretrainedModel | None]:
    """The converted folder for `name`: a catalogue model by its package version, a GGUF path by
    the sha256 of its bytes (so that a changed file is a new folder)."""
    if name in CATALOG:
        model = CATALOG[name]
        return pretrained_home() / f"{model.name}-{model.version()}-c{CONVERTER_VERSION}", model
    path = _gguf_file(name)
    return pretrained_home() / f"{path.stem}-{sha256_file(path)[:16]}-c{CONVERTER_VERSION}", None


def _convert(name: str, final: Path, model: PretrainedModel | None) -> None:
    require_gguf_reader()
    if model is not None:
        model.package_folder()  # a missing package is its one line, before any announcement
    if model is None:
        check_gguf(_gguf_file(name), model)  # before the announcement: a bad file is one line
    where = f"{model.title}, {model.terms}" if model else "a GGUF file"
    print(f"weightgraft: converting {name} ({where}) once into {final}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=pretrained_home(), prefix=".assemble-") as scratch:
        if model is None:
            gguf, source = _gguf_file(name), {"name": Path(name).name}
        else:
            gguf = model.gguf_path(Path(scratch))
            source = {"name": model.name, "package": model.package, "version": model.version(), "terms": model.terms}
        try:
            convert_gguf(gguf, final, source)
        except UserError:
            raise
        except UNREADABLE as err:
            raise BadModelFileError(f"{gguf} cannot be read as a model ({_first_line(err)}); {_fix(model)}") from None


# What transformers' and gguf's readers raise for a file that is not a model they read: not a GGUF
# (no magic bytes), empty (mmap), truncated (reshape), an architecture they do not know.
UNREADABLE = (ValueError, KeyError, IndexError, TypeError, AttributeError, EOFError, struct.error)


class BadModelFileError(UserError, ValueError):
    """A `.gguf` file (or a package's GGUF) that cannot be read as a model."""


def check_gguf(gguf: Path, model: PretrainedModel | None) -> None:
    """Refuse, from its header and tensor table alone, a file that is not a GGUF (random bytes,
    empty), is cut short, or holds an architecture transformers does not read."""
    from gguf import GGUFReader
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:
        field = GGUFReader(str(gguf)).fields.get("general.architecture")
        architecture = bytes(field.parts[field.data[0]]).decode("utf-8", "replace") if field else None
    except (*UNREADABLE, OSError) as err:
        raise BadModelFileError(f"{gguf} cannot be read as a model ({_first_line(err)}); {_fix(model)}") from None
    if architecture not in set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"}:
        raise BadModelFileError(
            f"{gguf} holds a model of architecture {architecture!r}, which transformers does not read "
            f"from GGUF; {_fix(model)}"
        )


def _fix(model: PretrainedModel | None) -> str:
    if model is not None:
        return f"the package's file is damaged: reinstall it with: {model.install}"
    return (
        "give a GGUF file of an architecture transformers reads (llama, mistral, qwen2, gemma3, ...), "
        f"or name a model: {', '.join(CATALOG)}"
    )


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _memo_key(name: str) -> tuple:
    """A catalogue name as it is; a GGUF path with its size and mtime, so a rewritten file is new."""
    if name in CATALOG:
        return (name,)
    try:
        stat = Path(name).expanduser().resolve().stat()
    except OSError:
        return (name,)
    return (name, stat.st_size, stat.st_mtime_ns)


def resolve_pretrained(name: str | Path) -> Path:
    """The folder (safetensors, config, tokenizer) of a real model or GGUF file, converted once."""
    key = str(name)
    memo = _memo_key(key)
    if memo in _resolved and intact(_resolved[memo]):
        return _resolved[memo]
    final, model = _target(key)
    pretrained_home().mkdir(parents=True, exist_ok=True)
    lock = pretrained_home() / f".{final.name}.lock"
    try:
        with waiting_lock(lock):  # a second caller waits, then reuses
            if not intact(final):
                say_why_again(final)
                _convert(key, final, model)
    except BaseException:
        lock.unlink(missing_ok=True)  # a failed first use leaves nothing behind in the home
        raise
    _resolved[memo] = final
    return final


def as_local(name_or_path: str | Path) -> str:
    """`name_or_path` with a real model's name or a `.gguf` path replaced by its converted folder;
    anything else unchanged (for loaders that take what `from_pretrained` takes)."""
    return str(resolve_pretrained(name_or_path)) if is_pretrained_name(name_or_path) else str(name_or_path)
