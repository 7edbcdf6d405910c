"""A safetensors checkpoint folder, read tensor by tensor without loading the rest.

The header of a safetensors file lists every tensor's name, shape and dtype, so a donor's shapes
can be checked against a recipient before one byte of weights is read, and a single tensor can
then be read from the memory-mapped file. Pickled `.bin` checkpoints are refused: unpickling can
run arbitrary code.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from huggingface_hub import snapshot_download
from safetensors import safe_open

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


def resolve_folder(source: str | Path, revision: str | None = None, kind: str = "checkpoint") -> Path:
    """A local folder as is; otherwise a Hugging Face hub id, fetched (or found in the cache)
    without its pickled files."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(f"{kind} {str(source)!r} is a file; pass the folder that holds it (with config.json)")
    if str(source).count("/") > 1 or str(source).startswith((".", "/", "~")):
        raise FileNotFoundError(f"{kind} folder {str(source)!r} does not exist")

    try:
        return Path(snapshot_download(str(source), revision=revision, allow_patterns=["*.json", "*.safetensors"]))
    except Exception as error:  # offline, unknown repo, gated repo: the hub's own message says which
        raise FileNotFoundError(
            f"{kind} {str(source)!r} is neither a local folder nor a Hugging Face repository that could be "
            f"fetched or found in the local cache ({type(error).__name__}: {error})"
        ) from error


def pickled_files(folder: Path) -> list[str]:
    return sorted({p.name for pattern in PICKLE_PATTERNS for p in folder.glob(pattern)})


class SafetensorsCheckpoint:
    """Where each tensor of a (possibly sharded) safetensors checkpoint lives, with shapes from
    the headers; `read` loads one tensor."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.weight_map = self._weight_map()
        self._headers: dict[str, dict[str, tuple[torch.Size, str]]] = {}

    def _weight_map(self) -> dict[str, str]:
        """Tensor name -> file name. Refuses pickle-only folders and missing shards by name."""
        index = self.folder / INDEX_FILE
        if index.is_file():
            weight_map = json.loads(index.read_text())["weight_map"]
            missing = sorted(set(weight_map.values()) - {p.name for p in self.folder.glob("*.safetensors")})
            if missing:
                held = [n for n, f in weight_map.items() if f == missing[0]]
                raise FileNotFoundError(
                    f"{self.folder} lists shard files that are missing: {missing} (the first holds "
                    f"{held[:4]}{' ...' if len(held) > 4 else ''}); download the checkpoint again, completely"
                )
            return weight_map
        files = sorted(self.folder.glob("*.safetensors"))
        if len(files) == 1:
            return {name: files[0].name for name in _header(files[0])}
        if len(files) > 1:
            raise ValueError(
                f"{self.folder} holds several .safetensors files {[f.name for f in files]} but no {INDEX_FILE} "
                "that says which tensors each holds"
            )
        pickles = pickled_files(self.folder)
        if pickles:
            raise ValueError(
                f"{self.folder} has only pickled weights {pickles}, which weightgraft never loads (unpickling can "
                "run code). Convert them once to safetensors, e.g. AutoModelForCausalLM.from_pretrained(folder)"
                ".save_pretrained(new_folder) in a session you trust, and pass new_folder"
            )
        raise FileNotFoundError(f"{self.folder} has no {SINGLE_FILE} (nor {INDEX_FILE}, nor any .safetensors file)")

    def shapes(self) -> dict[str, torch.Size]:
        """Every tensor's shape, from the headers alone (no tensor is read)."""
        out: dict[str, torch.Size] = {}
        for file in sorted(set(self.weight_map.values())):
            header = self._header_of(file)
            out.update({name: shape for name, (shape, _) in header.items()})
        return out

    def _header_of(self, file: str) -> dict[str, tuple[torch.Size, str]]:
        if file not in self._headers:
            self._headers[file] = _header(self.folder / file)
        return self._headers[file]

    def read(self, wanted: dict[str, tuple[torch.device, torch.dtype]]) -> dict[str, torch.Tensor]:
        """The named tensors, each copied out of its memory-mapped file onto a device in a dtype.

        Copies, not views into the map: a fresh allocation is aligned as the recipient's own
        weights are (so kernels, and results, are the same as for a donor in memory), and the
        file is unmapped once read, so that its pages leave the resident set.
        """
        unknown = [name for name in wanted if name not in self.weight_map]
        if unknown:
            raise KeyError(f"tensors {unknown[:4]} are not in the checkpoint {self.folder}")
        out: dict[str, torch.Tensor] = {}
        for file in sorted({self.weight_map[name] for name in wanted}):
            with safe_open(str(self.folder / file), framework="pt", device="cpu") as handle:
                for name, (device, dtype) in wanted.items():
                    if self.weight_map[name] == file:
                        out[name] = handle.get_tensor(name).to(device=device, dtype=dtype, copy=True)
        return out


def _header(path: Path) -> dict[str, tuple[torch.Size, str]]:
    """Name -> (shape, dtype name) from a safetensors header, read without touching the data."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file {path} is missing")
    with safe_open(str(path), framework="pt", device="cpu") as handle:
        out = {}
        for name in handle.keys():  # noqa: SIM118 (a safetensors handle, not a dict)
            piece = handle.get_slice(name)
            out[name] = (torch.Size(piece.get_shape()), piece.get_dtype())
        return out
