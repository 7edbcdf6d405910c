"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never half.

Files and folders get the modes the user's umask gives a plain `open`/`mkdir` (usually 0644 and
0755), not the private 0600/0700 of `tempfile`, so that outputs on a shared machine can be read
by the group as the user's other files can.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from weightgraft.errors import UserError
from weightgraft.locking import LOCK_NAME, folder_lock, sibling_lock_file


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
# A folder weightgraft writes (a dataset, a finetuned model) records the names it wrote in
# OWNED_RECORD. Replacing it touches only those names: a user's notes.txt beside them survives.

OWNED_RECORD = ".weightgraft-files"
INSTALLING = ".weightgraft-installing"  # present while a folder is replaced entry by entry


class OutputExistsError(UserError, ValueError):
    """The output folder exists and holds files; the user must ask for --overwrite."""


class IncompleteFolderError(UserError, ValueError):
    """A folder weightgraft was replacing when it was stopped: it mixes two builds."""


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


def is_nonempty_folder(path: str | Path) -> bool:
    path = Path(path)
    return path.is_dir() and any(path.iterdir())


def refuse_nonempty(final: str | Path, overwrite: bool, flag: str = "--overwrite") -> None:
    """Stop before any work when `final` holds files and `overwrite` was not asked for."""
    final = Path(os.path.abspath(final))
    if final.exists() and not final.is_dir():
        raise OutputExistsError(f"{final} is a file, not a folder; choose another --out")
    if is_nonempty_folder(final) and not overwrite:
        raise OutputExistsError(
            f"{final} exists and is not empty; pass {flag} to replace weightgraft's own files in it "
            "(other files are kept), or choose another --out"
        )


def refuse_foreign(folder: str | Path, marks: tuple[str, ...], what: str) -> None:
    """Stop before any work when `folder` holds files but none of `marks` (glob patterns of the
    files that make it `what`, e.g. run.json for a run folder): they are someone else's, and
    writing there would overwrite them. An earlier `what` is resumed as before."""
    folder = Path(os.path.abspath(folder))
    if folder.exists() and not folder.is_dir():
        raise OutputExistsError(f"{folder} is a file, not a folder; choose another --out")
    if not folder.is_dir():
        return
    if any(not p.name.startswith(LOCK_NAME) for p in folder.iterdir()) and not any(
        any(folder.glob(mark)) for mark in marks
    ):
        raise OutputExistsError(
            f"{folder} holds files that are not an earlier {what} (it has no {marks[0]}); weightgraft "
            "would overwrite them: choose a new or empty folder with --out"
        )


def owned_names(folder: Path) -> set[str]:
    """The names OWNED_RECORD lists; a line that is not a plain name (`..`, `.`, a path) is
    refused, never obeyed: it would point outside the folder."""
    record = Path(folder) / OWNED_RECORD
    if not record.is_file():
        return set()
    names = set()
    for number, line in enumerate(record.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line:
            continue
        if not is_plain_name(line):
            raise UntrustedRecordError(
                f"{record} line {number} names {line!r}, which is not a file in {folder}; weightgraft "
                f"will not delete through it: delete that line (or the file {OWNED_RECORD}) and run again"
            )
        names.add(line)
    return names


def check_records(folder: Path) -> None:
    """Read every OWNED_RECORD of `folder` and of the folders it records (recursively), so
    that an untrusted line stops a replacement before anything moves."""
    for name in owned_names(folder):
        entry = Path(folder) / name
        if entry.is_dir() and not entry.is_symlink():
            check_records(entry)


def install_folder(tmp: str | Path, final: str | Path) -> Path:
    """Put the finished folder `tmp` at `final`. An absent or empty `final` is replaced by one
    rename. Otherwise each entry of `tmp` is moved over its namesake in `final` (folders merged
    the same way), and the entries the previous write recorded but this one did not write are
    deleted; nothing else in `final` is touched. `tmp` must be on the same file system."""
    tmp, final = Path(tmp), Path(final)
    written = sorted(entry.name for entry in tmp.iterdir() if entry.name != OWNED_RECORD)
    (tmp / OWNED_RECORD).write_text("".join(f"{name}\n" for name in written), encoding="utf-8")
    if final.is_dir() and not any(final.iterdir()):
        final.rmdir()
    if not final.exists():
        os.replace(tmp, final)
        return final
    # Entry by entry is not one rename: until the end, a marker tells every reader that the
    # folder mixes two builds, and the record names both builds' entries (all of them ours).
    previous = owned_names(final)
    write_text_atomic(final / INSTALLING, "".join(f"{name}\n" for name in written))
    write_text_atomic(final / OWNED_RECORD, "".join(f"{name}\n" for name in sorted(previous | set(written))))
    for stale in sorted(previous - set(written)):
        remove_entry(final, stale)
    for name in written:
        source, target = tmp / name, final / name
        if source.is_dir() and target.is_dir() and not target.is_symlink():
            install_folder(source, target)
        else:
            if target.is_dir() and not target.is_symlink():
                raise OutputExistsError(f"{target} is a folder where weightgraft writes a file; move it away")
            os.replace(source, target)
    os.replace(tmp / OWNED_RECORD, final / OWNED_RECORD)
    tmp.rmdir()
    (final / INSTALLING).unlink()
    return final


@contextmanager
def atomic_directory(final: str | Path, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temp directory next to `final`; on success it becomes `final`.

    An interrupted build leaves only a hidden temp directory (removed on the next try), never a
    half-written `final`. An existing non-empty `final` is an error unless `overwrite`; then only
    weightgraft's own files in it are replaced (`install_folder`).
    """
    final = Path(os.path.abspath(final))
    refuse_nonempty(final, overwrite)
    final.parent.mkdir(parents=True, exist_ok=True)
    check_records(final)  # an untrusted record stops us before any work
    with folder_lock(sibling_lock_file(final), final):  # temp folders of a live writer are its own
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            remove_entry(final.parent, stale.name)
        tmp = make_temp_folder(final.parent, prefix=f".{final.name}.tmp-")
        try:
            yield tmp
            follow_umask(tmp)  # tempfile and save_pretrained make private files
            install_folder(tmp, final)
        except BaseException:
            if tmp.exists():
                remove_entry(final.parent, tmp.name)
            raise
