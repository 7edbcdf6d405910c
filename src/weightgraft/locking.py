"""One writer per folder: a lock file that a second weightgraft process meets with a one-line
refusal naming the holder, and that a killed holder does not leave behind for ever.

The lock is a small JSON file (pid, host, start time, command) put in place with `os.link`,
which fails when the file exists: of two processes only one gets it, and a lock file is never
seen half-written. A lock whose process no longer runs on this host is stale: the next process
says so and takes it over. A lock from another host cannot be checked and is refused with the
file to delete. The same process may take a lock it already holds (nested calls).

`waiting_lock` is the other kind, for work that a second caller should share rather than be
refused (the built-in models' cache): it waits until the holder is done (the kernel releases it
when its process dies), and then finds the work finished.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from weightgraft.errors import UserError, warn

LOCK_NAME = ".weightgraft-lock"
_held: dict[str, int] = {}  # lock path -> nesting depth, in this process


class FolderInUseError(UserError, RuntimeError):
    """Another weightgraft process is writing the same folder."""


def lock_file(folder: str | Path, tag: str = "") -> Path:
    """The lock of a folder weightgraft writes into (a run folder, a reproduce folder)."""
    return Path(folder) / f"{LOCK_NAME}{tag}"


def sibling_lock_file(final: str | Path) -> Path:
    """The lock of a folder weightgraft replaces whole (a dataset, a model): beside it, since the
    folder itself may not exist yet."""
    final = Path(os.path.abspath(final))
    return final.parent / f".{final.name}{LOCK_NAME}"


def _holder() -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["weightgraft", *sys.argv[1:]]) if sys.argv and sys.argv[0] else "python",
    }


def _read(path: Path) -> dict | None:
    """The holder a lock file names, or None when it names none that weightgraft wrote (no file,
    not JSON, or JSON without an int pid and a host: `{}` would read as "pid None on None")."""
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(body, dict) or type(body.get("pid")) is not int or not isinstance(body.get("host"), str):
        return None
    return body


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def _describe(holder: dict) -> str:
    """The holder in words; what its lock does not say is left out (never "started None")."""
    started = f", started {holder['started']}" if holder.get("started") else ""
    command = f": `{holder['command']}`" if holder.get("command") else ""
    return f"pid {holder.get('pid')} on {holder.get('host')}{started}{command}"


def _try_take(path: Path, what: str) -> bool:
    """Put our lock file at `path` unless one is there; True when we hold it now."""
    body = json.dumps(_holder() | {"folder": what})
    fd, tmp = tempfile.mkstemp(prefix=f"{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(body)
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: exclusive create, then write
        try:
            lock = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(lock, "w", encoding="utf-8") as handle:
            handle.write(body)
        return True
    finally:
        os.unlink(tmp)


@contextmanager
def folder_lock(path: str | Path, folder: str | Path) -> Iterator[Path]:
    """Hold the lock file `path` (see `lock_file`, `sibling_lock_file`) while writing `folder`.

    Raises FolderInUseError, naming the holder, when a live process holds it; takes over (with
    a warning) a lock whose process is gone."""
    path = Path(os.path.abspath(path))
    key = str(path)
    if key in _held:
        _held[key] += 1
        try:
            yield path
        finally:
            _held[key] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    while not _try_take(path, str(folder)):
        holder = _read(path)
        if holder is None:  # removed between our try and our read, or not ours to judge
            if path.exists() and _read(path) is None:
                raise FolderInUseError(
                    f"{folder} is locked by {path}, which weightgraft cannot read; if no weightgraft "
                    f"process is writing {folder}, delete {path} and run again"
                )
            continue
        same_host = holder.get("host") == socket.gethostname()
        pid = holder.get("pid")
        if same_host and isinstance(pid, int) and (pid == os.getpid() or not _alive(pid)):
            warn(f"{folder}: taking over the lock left by a process that no longer runs ({_describe(holder)})")
            _remove_if_unchanged(path, holder)
            continue
        raise FolderInUseError(
            f"{folder} is being written by another weightgraft process ({_describe(holder)}); "
            f"wait until it finishes (if that process is gone, delete {path})"
        )
    _held[key] = 1
    try:
        yield path
    finally:
        del _held[key]
        if _read(path) is not None and _read(path).get("pid") == os.getpid():
            path.unlink(missing_ok=True)


def _remove_if_unchanged(path: Path, holder: dict) -> None:
    """Remove a stale lock unless another process has replaced it meanwhile."""
    if _read(path) == holder:
        path.unlink(missing_ok=True)


@contextmanager
def waiting_lock(path: str | Path) -> Iterator[Path]:
    """Hold an exclusive `flock` on `path`, waiting while another process holds it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield path
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
