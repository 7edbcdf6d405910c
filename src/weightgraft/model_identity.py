"""One model given twice: the same folder, a link to it, or a copy whose weight and config files
are byte for byte the same.

Grafting a model into itself, or averaging it with itself, runs to the end and reports
something that looks like a finding (a verdict that blames the finetune, "the mean of 2
models"), so every command that takes a recipient and a donor, and `average`, refuses it
before any weights load. Files are compared with `filecmp` (it stops at the first differing
block), so two real finetunes of one base, whose files have the same sizes, cost a short read
each rather than a full hash.
"""

from __future__ import annotations

import filecmp
from pathlib import Path

from weightgraft.errors import UserError
from weightgraft.remote_code import local_folder

# The files that make a model what it computes (its tokenizer does not change the weights).
IDENTITY_FILES = ("*.safetensors", "*.bin", "*.pt", "*.pth", "config.json")


class SameModelError(UserError, ValueError):
    """Two roles that need different models were given one model."""


def _files(folder: Path) -> dict[str, Path]:
    return {p.name: p for pattern in IDENTITY_FILES for p in folder.glob(pattern) if p.is_file()}


def how_same(a: str | Path, b: str | Path) -> str | None:
    """How `a` and `b` are one model ("the same folder", "identical weight and config files"),
    or None when they are two (or cannot be told apart without loading: hub ids not cached)."""
    folder_a, folder_b = local_folder(a), local_folder(b)
    if folder_a is None or folder_b is None:
        return "the same hub id" if folder_a is None and folder_b is None and str(a) == str(b) else None
    if folder_a.resolve() == folder_b.resolve():
        return "the same folder"
    files_a, files_b = _files(folder_a), _files(folder_b)
    weights = [n for n in files_a if n != "config.json"]
    if not weights or files_a.keys() != files_b.keys():
        return None
    if all(filecmp.cmp(files_a[n], files_b[n], shallow=False) for n in sorted(files_a)):
        return "identical weight and config files"
    return None


def refuse_same_model(a: str | Path, b: str | Path, fields: tuple[str, str], action: str, where: str = "") -> None:
    """Raise SameModelError when `a` (named by `fields[0]`) and `b` (`fields[1]`) are one model.
    `action`: "graft" (a recipient and its donor) or "average" (two members); `where`: what
    the message starts with (the experiment and condition of a run config)."""
    how = how_same(a, b)
    if how is None:
        return
    fix = (
        "grafting a model into itself changes nothing: give as donor a finetune of the recipient"
        if action == "graft"
        else "averaging a model with itself gives it back: name distinct finetunes of one base model"
    )
    raise SameModelError(f"{where}{fields[0]} and {fields[1]} are one model ({a} and {b}: {how}); {fix}")
