"""Atomic file writes: a reader (or a resumed run) sees the old file or the new one, never half.

Files and folders get the modes the user's umask gives a plain `open`/`mkdir` (usually 0644 and
0755), not the private 0600/0700 of `tempfile`, so that outputs on a shared machine can be read
by the group as the user's other files can.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


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
