"""Output folders that may hold a user's own files: which entries weightgraft wrote there.

A folder weightgraft writes (a dataset, a model, a run, ...) holds OWNED_RECORD, written last: a
header naming the command that wrote the folder, then one line per entry it wrote, with the
entry's sha256 (FOLDER_MARK for a folder). It alone proves that the folder is weightgraft's (a
file named run.json proves nothing). Replacing the folder touches only the names recorded there,
and only for the same kind of command: a user's notes.txt beside them survives, and
`data --overwrite` never deletes a model `train` wrote. Putting a finished folder in place is
`folder_install`'s.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from weightgraft.atomic import write_text_atomic
from weightgraft.errors import UserError
from weightgraft.locking import LOCK_NAME
from weightgraft.runtime import sha256_file

OWNED_RECORD = ".weightgraft-files"
INSTALLING = ".weightgraft-installing"  # present while a folder is replaced entry by entry
RECORD_HEADER = "# written by weightgraft "
FOLDER_MARK = "folder"
# Commands that write the same kind of folder may replace each other's files (a model is a model).
COMMAND_KINDS = {"data": "dataset", "train": "model", "pretrain": "model", "average": "model", "demo": "run"}


class OutputExistsError(UserError, ValueError):
    """The output folder exists and holds files; the user must ask for --overwrite."""


class IncompleteFolderError(UserError, ValueError):
    """A folder weightgraft was replacing when it was stopped: it mixes two builds."""


class ForeignFolderError(OutputExistsError):
    """The output folder holds what another command (or someone else) wrote."""


class UserFileError(OutputExistsError):
    """An output would replace a file weightgraft did not record writing (the user's own)."""


class CrossDeviceError(OutputExistsError):
    """The output folder is on another file system than the folder beside it where weightgraft
    builds the new files, so they cannot be moved in."""


def check_whole(folder: str | Path) -> None:
    """Refuse a folder whose replacement was cut off (see `install_folder`): every reader of a
    dataset or model folder calls this before trusting what it reads."""
    folder = Path(folder)
    if (folder / INSTALLING).exists():
        raise IncompleteFolderError(
            f"{folder} was being replaced when weightgraft was stopped, so it mixes two builds; "
            "run the command that wrote it again (with --overwrite)"
        )


class UntrustedRecordError(UserError, ValueError):
    """A record of names weightgraft wrote (OWNED_RECORD) names something outside its folder."""


def is_plain_name(name: str) -> bool:
    """A name that can only mean an entry directly inside a folder: not empty, not `.` or `..`,
    no path separator, no NUL, not absolute."""
    return bool(name) and name not in (".", "..") and not any(c in name for c in "/\\\0") and not os.path.isabs(name)


def remove_entry(folder: str | Path, name: str) -> None:
    """Delete the entry `name` directly inside `folder`: the only way weightgraft deletes in a
    folder a user gave it. `name` must be a plain name (see `is_plain_name`); a symlink is
    removed as a link, never followed (nor are links inside a removed folder). Absent is fine."""
    if not is_plain_name(name):
        raise UntrustedRecordError(f"refusing to delete {name!r} in {folder}: not a plain name inside that folder")
    target = Path(folder) / name
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        target.unlink(missing_ok=True)
    elif target.is_dir():
        shutil.rmtree(target)


def remove_owned(folder: str | Path, name: str) -> None:
    """Delete the entry `name` of `folder` as far as weightgraft wrote it: a folder holding its
    own record loses only the entries recorded there (recursively) and goes only when nothing
    else is left in it, so a user's file inside survives; anything else as `remove_entry`."""
    target = Path(folder) / name
    record = read_record(target) if is_plain_name(name) and target.is_dir() and not target.is_symlink() else None
    if record is None:
        remove_entry(folder, name)
        return
    for inner in sorted(record.files):
        remove_owned(target, inner)
    remove_entry(target, OWNED_RECORD)
    if not any(target.iterdir()):
        target.rmdir()


def is_nonempty_folder(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and any(path.iterdir())


def kind_of(command: str) -> str:
    return COMMAND_KINDS.get(command, command)


@dataclass(frozen=True)
class OwnedRecord:
    """A folder's OWNED_RECORD: the command that wrote it (None in a record from before records
    named it) and its entries, name -> sha256 or FOLDER_MARK ("" where an older record has none)."""

    command: str | None
    files: dict[str, str]


def read_record(folder: str | Path) -> OwnedRecord | None:
    """The folder's OWNED_RECORD, or None without one; a line that is not a plain name (`..`,
    `.`, a path) is refused, never obeyed: it would point outside the folder."""
    record = Path(folder) / OWNED_RECORD
    if not record.is_file() or record.is_symlink():
        return None
    command, files = None, {}
    for number, line in enumerate(record.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if number == 1 and line.startswith(RECORD_HEADER):
            command = line[len(RECORD_HEADER) :].strip() or None
            continue
        if not line:
            continue
        name, tab, digest = line.rpartition("\t")
        name, digest = (name, digest) if tab else (line, "")
        if not is_plain_name(name):
            raise UntrustedRecordError(
                f"{record} line {number} names {name!r}, which is not a file in {folder}; weightgraft "
                f"will not delete through it: delete that line (or the file {OWNED_RECORD}) and run again"
            )
        files[name] = digest
    return OwnedRecord(command, files)


def owned_names(folder: Path) -> set[str]:
    """The names OWNED_RECORD lists (none without a record)."""
    record = read_record(folder)
    return set(record.files) if record else set()


def entry_digest(path: Path) -> str:
    """What a record says of an entry: its sha256, FOLDER_MARK for a folder ("" for a link)."""
    if path.is_symlink():
        return ""
    return FOLDER_MARK if path.is_dir() else sha256_file(path)


def record_text(command: str | None, files: dict[str, str]) -> str:
    header = [f"{RECORD_HEADER}{command}"] if command else []
    return "".join(f"{line}\n" for line in [*header, *(f"{n}\t{d}" for n, d in sorted(files.items()))])


def seal_folder(folder: str | Path, command: str, names: list[str]) -> None:
    """Write `folder`'s record, last: `command` wrote the entries `names` (those that exist,
    hashed now) and every entry an earlier record of the same folder listed."""
    folder = Path(folder)
    previous = read_record(folder)
    files = dict(previous.files) if previous else {}
    files.update({name: entry_digest(folder / name) for name in names if (folder / name).exists()})
    write_text_atomic(folder / OWNED_RECORD, record_text(command, files))


def refuse_nonempty(final: str | Path, overwrite: bool, flag: str = "--overwrite", command: str | None = None) -> None:
    """Stop before any work when `final` holds files and `overwrite` was not asked for, or when
    `overwrite` would replace what another command wrote there (see `refuse_other_command`)."""
    final = Path(os.path.abspath(final))
    if final.exists() and not final.is_dir():
        raise OutputExistsError(f"{final} is a file, not a folder; choose another --out")
    if is_nonempty_folder(final) and not overwrite:
        raise OutputExistsError(
            f"{final} exists and is not empty; pass {flag} to replace weightgraft's own files in it "
            "(other files are kept), or choose another --out"
        )
    if is_nonempty_folder(final):
        if command:
            refuse_other_command(final, command)
        check_records(final)  # an untrusted record stops us before any work
    refuse_mount_point(final)


def refuse_other_command(folder: Path, command: str) -> None:
    """`--overwrite` replaces only what the same kind of command wrote: a folder whose record
    names another command is refused, naming it (a record of an older weightgraft, which
    names no command, is taken as this command's)."""
    record = read_record(folder)
    if record is not None and record.command is not None and kind_of(record.command) != kind_of(command):
        raise ForeignFolderError(
            f"{folder} was written by `weightgraft {record.command}`, not `weightgraft {command}`; "
            f"--overwrite replaces only what `weightgraft {command}` wrote, so it would delete that "
            "command's files: choose another --out"
        )


def refuse_mount_point(final: Path) -> None:
    """weightgraft builds a folder beside `final` and moves it in: across file systems (a mount
    point as --out) no move works, so refuse before any work instead of half-way."""
    final = Path(os.path.realpath(final))
    if final.is_dir() and os.stat(final).st_dev != os.stat(final.parent).st_dev:
        raise CrossDeviceError(
            f"{final} is on another file system than {final.parent}, where weightgraft builds the new "
            "files before moving them in; give a folder inside it as --out"
        )


def is_bookkeeping(name: str) -> bool:
    """A lock file, or a record that another weightgraft process is writing right now (the
    temporary file `write_atomic` renames into OWNED_RECORD): neither is anyone's result. Two
    shards of one run claim their folder side by side, and the other shard's half-written record
    must not read as a stranger's file."""
    return name.startswith(LOCK_NAME) or (name.startswith(f".{OWNED_RECORD}.") and name.endswith(".tmp"))


def other_entries(folder: Path) -> list[Path]:
    """The entries of `folder` other than bookkeeping (see `is_bookkeeping`) and OWNED_RECORD."""
    return [p for p in folder.iterdir() if not is_bookkeeping(p.name) and p.name != OWNED_RECORD]


def refuse_foreign(folder: str | Path, command: str, marks: tuple[str, ...]) -> None:
    """Stop before any work when `folder` holds files and no record (OWNED_RECORD) says that
    `weightgraft command` wrote it: they are someone else's, and writing there would overwrite
    them. A file named like one of `marks` (e.g. run.json) proves nothing. An earlier folder of
    `command` is resumed as before."""
    folder, what = Path(os.path.abspath(folder)), f"weightgraft {command}"
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"{folder} is a file, not a folder; choose another --out")
    if not folder.is_dir() or not [p for p in folder.iterdir() if not is_bookkeeping(p.name)]:
        return
    record = read_record(folder)
    if record is not None and record.command is not None:
        if kind_of(record.command) != kind_of(command):
            raise ForeignFolderError(
                f"{folder} was written by `weightgraft {record.command}`, not `{what}`; {what} would "
                "overwrite that command's files: choose a new or empty folder with --out"
            )
        return
    found = [mark for mark in marks if any(folder.glob(mark))]
    if found and record is None:
        raise ForeignFolderError(
            f"{folder} has a {found[0]} but no record ({OWNED_RECORD}) that {what} wrote the folder; a file "
            "of that name proves nothing, and weightgraft would overwrite the files beside it: choose a new "
            "or empty folder with --out"
        )
    raise OutputExistsError(
        f"{folder} holds files that are not an earlier {what} (it has no {marks[0]}); weightgraft "
        "would overwrite them: choose a new or empty folder with --out"
    )


def claim_folder(folder: str | Path, command: str) -> None:
    """Make `folder` `command`'s (after `refuse_foreign`, under its lock): an absent or empty one
    gets a record naming `command` and no entries yet, which `seal_folder` completes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if read_record(folder) is None and not other_entries(folder):
        write_text_atomic(folder / OWNED_RECORD, record_text(command, {}))


def clear_folder(folder: str | Path, command: str, names: set[str]) -> None:
    """Delete the entries `names` of `folder` (a folder `command` wrote, asked to be replaced
    whole) and leave its record naming `command` and nothing else, so nothing of before stays."""
    folder = Path(folder)
    for name in sorted(names):
        remove_owned(folder, name)
    write_text_atomic(folder / OWNED_RECORD, record_text(command, {}))


def release_unused(folder: Path, made: bool) -> None:
    """A folder made by `claim_folder` that got nothing but its record is removed again: a
    command stopped before writing anything (e.g. a check failed) leaves no trace."""
    if made and folder.is_dir() and not other_entries(folder):
        record = read_record(folder)
        if record is not None and not record.files:
            remove_entry(folder, OWNED_RECORD)
        if not any(folder.iterdir()):
            folder.rmdir()


def check_records(folder: Path) -> None:
    """Read every OWNED_RECORD of `folder` and of the folders it records (recursively), so
    that an untrusted line stops a replacement before anything moves."""
    for name in owned_names(folder):
        entry = Path(folder) / name
        if entry.is_dir() and not entry.is_symlink():
            check_records(entry)
