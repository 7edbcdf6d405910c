"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never half.

Files and folders get the modes the user's umask gives a plain `open`/`mkdir` (usually 0644 and
0755), not the private 0600/0700 of `tempfile`, so that outputs on a shared machine can be read
by the group as the user's other files can.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from weightgraft.errors import UserError
from weightgraft.locking import LOCK_NAME, folder_lock, sibling_lock_file
from weightgraft.runtime import sha256_file


def current_umask() -> int:
    """The process umask (read by setting it and putting it back; there is no getter)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~current_umask()


def folder_mode() -> int:
    return 0o777 & ~current_umask()


def follow_umask(path: str | Path) -> Path:
    """Give a file or folder tree (ours, e.g. one made by tempfile or save_pretrained) the modes
    the umask gives new files and folders."""
    path = Path(path)
    paths = [path, *path.rglob("*")] if path.is_dir() else [path]
    for item in paths:
        if not item.is_symlink():
            os.chmod(item, folder_mode() if item.is_dir() else file_mode())
    return path


def make_temp_folder(parent: str | Path, prefix: str) -> Path:
    """`tempfile.mkdtemp` in `parent`, with the umask's folder mode instead of 0700."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    os.chmod(tmp, folder_mode())
    return tmp


_written: set[str] = set()  # every file this process wrote through write_atomic (see `written_here`)


def written_here(path: str | Path) -> bool:
    """`path` was written by this process (through `write_atomic`): a file a record may claim."""
    return os.path.abspath(path) in _written


def write_atomic(path: str | Path, writer: Callable[[Path], None]) -> Path:
    """Call `writer(tmp_path)` on a temporary file in the same folder, then rename it over path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        writer(Path(tmp))
        os.chmod(tmp, file_mode())  # mkstemp makes 0600
        os.replace(tmp, path)
        _written.add(os.path.abspath(path))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_json(path: str | Path, obj: dict) -> Path:
    """Indented JSON with sorted keys (stable diffs between runs), written atomically."""
    return write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


# --- Output folders that may hold a user's own files -------------------------------------------
# A folder weightgraft writes (a dataset, a model, a run, ...) holds OWNED_RECORD, written last: a header naming
# the command that wrote the folder, then one line per entry it wrote, with the entry's sha256 (FOLDER_MARK for
# a folder). It alone proves that the folder is weightgraft's (a file named run.json proves nothing). Replacing
# the folder touches only the names recorded there, and only for the same kind of command: a user's notes.txt
# beside them survives, and `data --overwrite` never deletes a model `train` wrote.

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


def other_entries(folder: Path) -> list[Path]:
    """The entries of `folder` other than lock files and OWNED_RECORD."""
    return [p for p in folder.iterdir() if not p.name.startswith(LOCK_NAME) and p.name != OWNED_RECORD]


def refuse_foreign(folder: str | Path, command: str, marks: tuple[str, ...]) -> None:
    """Stop before any work when `folder` holds files and no record (OWNED_RECORD) says that
    `weightgraft command` wrote it: they are someone else's, and writing there would overwrite
    them. A file named like one of `marks` (e.g. run.json) proves nothing. An earlier folder of
    `command` is resumed as before."""
    folder, what = Path(os.path.abspath(folder)), f"weightgraft {command}"
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"{folder} is a file, not a folder; choose another --out")
    if not folder.is_dir() or not [p for p in folder.iterdir() if not p.name.startswith(LOCK_NAME)]:
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


def check_targets(tmp: Path, final: Path) -> None:
    """Everything `install_folder` will meet, checked before it changes anything: a folder of
    the user's where a file goes, or a file system the new entries cannot be moved to."""
    if os.stat(tmp).st_dev != os.stat(final).st_dev:
        raise CrossDeviceError(
            f"{final} is on another file system than {tmp.parent}, where weightgraft builds the new "
            "files before moving them in; give a folder inside it as --out"
        )
    recorded = owned_names(final)
    for source in tmp.iterdir():
        target = final / source.name
        if source.name == OWNED_RECORD or not (target.exists() or target.is_symlink()):
            continue
        if target.is_dir() and not target.is_symlink():
            if not source.is_dir():
                raise OutputExistsError(f"{target} is a folder where weightgraft writes a file; move it away")
            check_targets(source, target)  # merged: only its files of our names matter
        elif source.name not in recorded:
            raise UserFileError(
                f"{target} is not a file weightgraft recorded writing (its folder's {OWNED_RECORD} does not "
                "list it), and the new output has one of that name; --overwrite replaces only weightgraft's "
                "own files: move it away or choose another --out"
            )


def install_folder(
    tmp: str | Path, final: str | Path, command: str | None = None, started: list[str] | None = None
) -> Path:
    """Put the finished folder `tmp` at `final`. An absent or empty `final` is replaced by one
    rename. Otherwise each entry of `tmp` is moved over its namesake in `final` (folders merged
    the same way; a link is replaced as a link, never followed), and the entries the previous
    write recorded but this one did not write are deleted; nothing else in `final` is touched.
    `tmp` must be on the same file system. The record, naming `command`, is written last.
    `started` collects what has been moved (shared with the replacements of subfolders): a
    replacement that fails before moving anything leaves the folder unmarked, as it was."""
    tmp, final = Path(tmp), Path(final)
    written = install_record(tmp, command)
    if final.is_dir() and not final.is_symlink() and not any(final.iterdir()):
        final.rmdir()
    if not final.exists() and not final.is_symlink():
        os.replace(tmp, final)
        return final
    check_targets(tmp, final)
    # Entry by entry is not one rename: until the end, a marker tells every reader that the
    # folder mixes two builds, and the record names both builds' entries (all of them ours).
    previous = read_record(final)
    before = (final / OWNED_RECORD).read_text(encoding="utf-8") if previous is not None else None
    previous = previous or OwnedRecord(command, {})
    write_text_atomic(final / INSTALLING, "".join(f"{name}\n" for name in sorted(written)))
    write_text_atomic(final / OWNED_RECORD, record_text(command, previous.files | written))
    started = [] if started is None else started
    moved_before = len(started)
    try:
        move_entries(tmp, final, sorted(written), command, started)
    except OSError:
        if len(started) == moved_before:  # nothing moved: the folder is still the previous build
            undo_marker(final, before)
        raise
    for stale in sorted(set(previous.files) - set(written)):
        remove_owned(final, stale)
    os.replace(tmp / OWNED_RECORD, final / OWNED_RECORD)
    tmp.rmdir()
    (final / INSTALLING).unlink()
    return final


def install_record(folder: Path, command: str | None = None) -> dict[str, str]:
    """Record every entry of `folder` (built whole by weightgraft) as written by `command`, in it
    and in each plain folder inside it (everything in it is ours); the entries recorded."""
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink() and read_record(entry) is None:
            install_record(entry)
    files = {entry.name: entry_digest(entry) for entry in folder.iterdir() if entry.name != OWNED_RECORD}
    (folder / OWNED_RECORD).write_text(record_text(command, files), encoding="utf-8")
    return files


def move_entries(tmp: Path, final: Path, names: list[str], command: str | None, started: list[str]) -> None:
    """Move each entry `names` of `tmp` over its namesake in `final` (folders merged, links
    replaced as links), appending each name to `started` once `final` has begun to change."""
    for name in names:
        source, target = tmp / name, final / name
        if source.is_dir() and target.is_dir() and not target.is_symlink():
            install_folder(source, target, command, started)
            continue
        if target.is_symlink():
            started.append(str(target))
            remove_entry(final, name)  # a link is replaced, never followed
        os.replace(source, target)
        started.append(str(target))


def undo_marker(final: Path, record: str | None) -> None:
    """Put back the record a replacement found (`record`: its text, None for none) and drop the
    marker: called only when the replacement failed before changing anything."""
    if record is None:
        remove_entry(final, OWNED_RECORD)
    else:
        write_text_atomic(final / OWNED_RECORD, record)
    remove_entry(final, INSTALLING)


@contextmanager
def atomic_directory(final: str | Path, overwrite: bool = False, command: str | None = None) -> Iterator[Path]:
    """Yield a temp directory next to `final`; on success it becomes `final`.

    An interrupted build leaves only a hidden temp directory (removed on the next try), never a
    half-written `final`. An existing non-empty `final` is an error unless `overwrite`; then only
    weightgraft's own files in it are replaced (`install_folder`), and only when the same kind of
    `command` wrote them. A symlinked `final` is followed: the temp directory is made beside the
    folder it points to, on that folder's file system. Every refusal comes before the body runs.
    """
    final = Path(os.path.realpath(os.path.abspath(final)))
    refuse_nonempty(final, overwrite, command=command)
    final.parent.mkdir(parents=True, exist_ok=True)
    with folder_lock(sibling_lock_file(final), final):  # temp folders of a live writer are its own
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            remove_entry(final.parent, stale.name)
        tmp = make_temp_folder(final.parent, prefix=f".{final.name}.tmp-")
        try:
            yield tmp
            follow_umask(tmp)  # tempfile and save_pretrained make private files
            install_folder(tmp, final, command)
        except OSError as err:
            if tmp.exists():
                remove_entry(final.parent, tmp.name)
            if err.errno == errno.EXDEV:
                raise CrossDeviceError(
                    f"{final} is on another file system than {final.parent}, where weightgraft builds the "
                    "new files before moving them in; give a folder inside it as --out"
                ) from err
            raise
        except BaseException:
            if tmp.exists():
                remove_entry(final.parent, tmp.name)
            raise
