"""A finetune's Trainer checkpoints, sealed when written and checked before a resume.

Trainer writes a checkpoint's files and then `trainer_state.json`, but nothing says later whether
the weights or optimizer state are still the bytes it wrote. So each checkpoint gets a record of
its files' sizes and sha256 once Trainer has saved it (`SealCheckpoints`), and a resume takes the
newest checkpoint whose files all match their record: a checkpoint cut off before its record, or
damaged since, is passed over, never resumed from.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import TrainerCallback

from weightgraft.atomic import write_json
from weightgraft.errors import warn
from weightgraft.runtime import file_facts, file_unchanged

CHECKPOINT_RECORD = "weightgraft-checkpoint.json"


def seal_checkpoint(folder: Path) -> None:
    """Record every file of a saved checkpoint with its size, mtime and sha256 (written last)."""
    files = sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != CHECKPOINT_RECORD)
    write_json(Path(folder) / CHECKPOINT_RECORD, {"files": {str(p.relative_to(folder)): file_facts(p) for p in files}})


def intact_checkpoint(folder: Path) -> bool:
    """Every file the checkpoint's record lists is still the bytes it recorded (`file_unchanged`)."""
    try:
        record = json.loads((folder / CHECKPOINT_RECORD).read_text(encoding="utf-8"))["files"]
        return all(file_unchanged(folder / name, facts) for name, facts in record.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def last_complete_checkpoint(folder: Path) -> str | None:
    """The newest `checkpoint-N` that is whole and unchanged since it was sealed; newer ones that
    are not (cut off while saving, or damaged) are named in a warning and passed over."""
    found = [p for p in Path(folder).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    for path in sorted(found, key=lambda p: int(p.name.split("-")[-1]), reverse=True):
        if intact_checkpoint(path):
            return str(path)
        warn(f"{path} is incomplete or changed since it was saved; not resumed from")
    return None


class SealCheckpoints(TrainerCallback):
    """Seal each checkpoint right after Trainer saves it (on the main process, which writes it)."""

    def on_save(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                seal_checkpoint(folder)
        return control
