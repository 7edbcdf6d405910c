"""What weightgraft recorded writing, used both ways: a file it reuses is checked against the
sha256 recorded for it (`check_recorded_files`), and the folders inside a folder it writes into
(a run's `plots/`, `examples/`) get records of their own (`seal_tree`), so that replacing the
folder deletes only the files weightgraft wrote there, never a user's file beside them."""

from __future__ import annotations

import fnmatch
from pathlib import Path

from weightgraft.atomic import write_text_atomic, written_here
from weightgraft.errors import UserError
from weightgraft.folder_ownership import FOLDER_MARK, OWNED_RECORD, UserFileError, read_record, record_text
from weightgraft.runtime import sha256_verified


class DamagedFileError(UserError, ValueError):
    """A file weightgraft wrote is no longer the bytes (sha256) it recorded writing."""


def check_recorded_files(folder: str | Path, patterns: tuple[str, ...]) -> None:
    """Refuse a file of `folder` matching one of `patterns` whose sha256 differs from the one
    OWNED_RECORD holds for it (hashed once per process, whatever its mtime says): a model
    folder weightgraft wrote is never used damaged. Files the record does not list pass."""
    folder = Path(folder)
    record = read_record(folder)
    for name, digest in sorted(record.files.items()) if record else []:
        path = folder / name
        wanted = len(digest) == 64 and any(fnmatch.fnmatch(name, pattern) for pattern in patterns)
        if wanted and path.is_file() and not path.is_symlink() and sha256_verified(path) != digest:
            writer = f"`weightgraft {record.command}`" if record.command else "the weightgraft command that wrote it"
            raise DamagedFileError(
                f"{path} differs from the sha256 weightgraft recorded when it wrote it (damaged since); "
                f"run {writer} again (or, if you changed it on purpose, delete {folder / OWNED_RECORD})"
            )


def seal_tree(folder: str | Path, names: list[str]) -> None:
    """Give each folder among the entries `names` of `folder` (and each folder inside them) a
    record of the entries weightgraft wrote there: those an earlier record listed that still
    exist, and the files this process wrote (`written_here`). A user's file is never listed."""
    for name in names:
        entry = Path(folder) / name
        if entry.is_dir() and not entry.is_symlink():
            _seal_inner(entry)


def _seal_inner(folder: Path) -> bool:
    """Record what weightgraft wrote in `folder` (see `seal_tree`); True when it wrote anything."""
    previous = read_record(folder)
    files = {n: d for n, d in (previous.files if previous else {}).items() if (folder / n).exists()}
    for entry in sorted(folder.iterdir()):
        if entry.name == OWNED_RECORD or entry.is_symlink():
            continue
        if entry.is_dir():
            if _seal_inner(entry):
                files[entry.name] = FOLDER_MARK
        elif written_here(entry):
            files[entry.name] = sha256_verified(entry)
    if files and (previous is None or previous.files != files):
        write_text_atomic(folder / OWNED_RECORD, record_text(None, files))
    return bool(files)


class OwnInputError(UserError, ValueError):
    """A command was asked to write its output over (or inside, or around) one of its inputs."""


def refuse_own_input(out: str | Path, inputs: dict[str, str | Path | None]) -> None:
    """Stop before any work when `out` is one of the command's `inputs` (`{option: path}`), lies
    inside one, or holds one: --overwrite would replace the files the command reads. Inputs
    that are not paths on disk (a hub id, a model's name) pass."""
    target = Path(out).expanduser().resolve()
    for option, given in inputs.items():
        if given is None or not Path(given).expanduser().exists():
            continue
        source = Path(given).expanduser().resolve()
        if target == source or source in target.parents or target in source.parents:
            how = "is" if target == source else "lies inside" if source in target.parents else "holds"
            raise OwnInputError(
                f"--out {out} {how} the command's own input {option} {given}; writing there would "
                "replace what the command reads: choose another --out"
            )


# The files a model folder of `train`, `average` or `pretrain` may hold (save_pretrained's, the
# tokenizer's and weightgraft's training record), checked before any work (`refuse_user_files`).
MODEL_OUTPUTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
    "training_config.json",
)


def refuse_user_files(out: str | Path, names: tuple[str, ...] = MODEL_OUTPUTS) -> None:
    """Before any work, refuse an `out` holding a file of one of the output `names` that its
    record does not list (the user's own: `--overwrite` replaces only weightgraft's files; the
    replacement itself checks again, `atomic.check_targets`)."""
    out = Path(out)
    if not out.is_dir():
        return
    record = read_record(out)
    recorded = set(record.files) if record else set()
    for name in names:
        target = out / name
        if (target.exists() or target.is_symlink()) and name not in recorded:
            raise UserFileError(
                f"{target} is not a file weightgraft recorded writing (its folder's {OWNED_RECORD} does not "
                "list it), and the new output has one of that name; --overwrite replaces only weightgraft's "
                "own files: move it away or choose another --out"
            )
