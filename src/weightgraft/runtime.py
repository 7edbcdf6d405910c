"""Where this process stands: its rank, weightgraft's cache folder, its device and file hashing.

Each is resolved here and only here, so that every command answers them the same way:

- rank: torch.distributed's own answer once a process group is up, else the `RANK`,
  `WORLD_SIZE` and `LOCAL_RANK` that torchrun and `accelerate launch` set (0, 1, 0 without them);
- home: `$WEIGHTGRAFT_HOME`, or `~/.cache/weightgraft` when it is unset or empty;
- device: "auto" is the first CUDA GPU when torch sees one, else the CPU; any other name is kept;
  the one check of a device name (`check_device`: cpu, cuda, cuda:N or mps, "auto" where the
  caller allows it, and, when asked, present on this machine), whose ValueError each caller
  raises as its own kind of error;
- hashing: the sha256 of a file's bytes, and of a JSON-able object (keys sorted, anything else as
  its string).

torch is imported only where a device must be resolved or looked for (inside `resolve_device`
and `check_device`): data-only commands (`weightgraft data`) start without it (torch would add
1.4 s to their start, measured on a loaded 2-core machine). The module imports nothing from weightgraft.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from pathlib import Path

HOME_VARIABLE = "WEIGHTGRAFT_HOME"
AUTO = "auto"
# The devices a model computes on (torch also knows `meta`, tensors without data, on which a run
# would fail at its first model load).
DEVICE_NAME = re.compile(r"cpu|mps|cuda(:[0-9]+)?")
_BLOCK = 2**20  # files are hashed in 1 MiB blocks


def home() -> Path:
    """weightgraft's cache folder (built-in models, the file-hash cache): `$WEIGHTGRAFT_HOME`, or
    `~/.cache/weightgraft` when that variable is unset or empty."""
    return Path(os.environ.get(HOME_VARIABLE) or Path.home() / ".cache" / "weightgraft")


def _process_group():
    """torch.distributed when it was imported and a process group is up, else None (never
    imports torch itself)."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def rank() -> int:
    """This process's rank among all processes of a launch (0 alone)."""
    dist = _process_group()
    return dist.get_rank() if dist is not None else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """How many processes the launch has (1 alone)."""
    dist = _process_group()
    return dist.get_world_size() if dist is not None else int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """This process's rank on its own machine (the GPU it takes): `LOCAL_RANK`, 0 alone."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def is_main_process() -> bool:
    """True on rank 0: the one process that writes a launch's shared files."""
    return rank() == 0


def launch_shard() -> tuple[int, int] | None:
    """(rank, world size) when launched with more than one process, else None."""
    world = world_size()
    return (rank(), world) if world > 1 else None


def resolve_device(device: str) -> str:
    """`device` with "auto" made concrete: "cuda" when torch sees a GPU, else "cpu"."""
    if device != AUTO:
        return device
    import torch  # here, not at the top: data-only commands start without torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str, *, auto: bool = False, here: bool = False) -> str:
    """`device` when it names a device a model computes on (cpu, cuda, cuda:N or mps; "auto" too
    where `auto` allows it) and, with `here`, one this machine has (torch is imported then); a
    ValueError saying why otherwise, which the caller raises as its own kind of error (a
    command-line option's, a run config's, a UserError)."""
    if not (DEVICE_NAME.fullmatch(device) or (auto and device == AUTO)):
        forms = "auto, cpu, cuda, cuda:N or mps" if auto else "cpu, cuda, cuda:N or mps"
        raise ValueError(f"{device!r} is not a device; use {forms}")
    if here and device != AUTO:  # "auto" is always here: it resolves to what torch sees
        _check_present(device)
    return device


def _check_present(device: str) -> None:
    import torch  # here, not at the top: data-only commands start without torch

    kind = torch.device(device)
    if kind.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"device: {device!r} asks for a GPU, but torch sees no CUDA device "
                "here; use `device: cpu` (or --device cpu)"
            )
        if kind.index is not None and kind.index >= torch.cuda.device_count():
            raise ValueError(
                f"device: {device!r}, but there are only {torch.cuda.device_count()} "
                f"CUDA device(s) (cuda:0..cuda:{torch.cuda.device_count() - 1})"
            )
    if kind.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device: {device!r} is not available on this machine; use `device: cpu`")


def sha256_file(path: str | Path) -> str:
    """sha256 of every byte of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def file_facts(path: Path) -> dict:
    """What a file was when it was written: size, mtime and sha256 (see `file_unchanged`)."""
    stat = path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256_file(path)}


_verified: dict[tuple, str] = {}  # (path, device, inode, size, mtime, ctime) -> sha256, this process only


def sha256_verified(path: Path) -> str:
    """The sha256 of `path`, hashed once per process while its (device, inode, size, mtime,
    ctime) stay put: a write changes its ctime even when its mtime is put back, so a file
    rewritten in place is hashed again. Never kept across processes: bit rot moves nothing."""
    stat = path.stat()
    key = (os.path.abspath(path), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    if key not in _verified:
        _verified[key] = sha256_file(path)
    return _verified[key]


def file_unchanged(path: Path, facts: dict) -> bool:
    """A file is still the bytes `file_facts` recorded: there, of its size (the fast refusal),
    and of its sha256, always (a kept size and mtime prove nothing: bit rot and `cp -p` of a
    damaged copy keep both); hashed once per process (`sha256_verified`)."""
    if not path.is_file():
        return False
    if path.stat().st_size != facts.get("size"):
        return False
    return sha256_verified(path) == facts.get("sha256")


def sha256_json(obj) -> str:
    """sha256 of a JSON-able object written with sorted keys (paths and other objects as strings)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def sha256_folder(folder: str | Path, skip: tuple[str, ...] = ()) -> str:
    """sha256 over every file under `folder` (its path inside the folder and its bytes), in
    sorted order; files named in `skip` are left out."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name not in skip):
        digest.update(f"{path.relative_to(folder).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()
