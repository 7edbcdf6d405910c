"""Putting a folder built whole beside its final place there: in one rename when the place is
empty, else entry by entry over weightgraft's own files only (`folder_ownership` says which),
with a marker while the folder mixes two builds. `atomic_directory` is the writer's side.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from weightgraft.atomic import follow_umask, make_temp_folder, write_text_atomic
from weightgraft.folder_ownership import (
    INSTALLING,
    OWNED_RECORD,
    CrossDeviceError,
    OutputExistsError,
    OwnedRecord,
    UserFileError,
    entry_digest,
    owned_names,
    read_record,
    record_text,
    refuse_nonempty,
    remove_entry,
    remove_owned,
)
from weightgraft.locking import folder_lock, sibling_lock_file


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
