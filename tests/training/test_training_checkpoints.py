"""A resume takes the newest checkpoint whose files are the bytes Trainer wrote (issue 31: every
file a step reuses is checked against the hash recorded when it was written)."""

from __future__ import annotations

from pathlib import Path

from weightgraft.training.checkpoints import CHECKPOINT_RECORD, last_complete_checkpoint, seal_checkpoint


def _checkpoint(root: Path, step: int, sealed: bool = True) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * step)
    (folder / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    if sealed:
        seal_checkpoint(folder)
    return folder


def test_the_newest_sealed_and_unchanged_checkpoint_is_resumed_from(tmp_path, capsys):
    _checkpoint(tmp_path, 10)
    newest = _checkpoint(tmp_path, 20)
    assert last_complete_checkpoint(tmp_path) == str(newest)
    weights = newest / "model.safetensors"
    damaged = bytearray(weights.read_bytes())
    damaged[5] ^= 0xFF  # one byte changed, same size
    weights.write_bytes(bytes(damaged))
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")
    assert "checkpoint-20 is incomplete or changed since it was saved" in capsys.readouterr().err


def test_a_checkpoint_cut_off_before_its_seal_is_passed_over(tmp_path):
    _checkpoint(tmp_path, 10)
    _checkpoint(tmp_path, 20, sealed=False)  # Trainer saved it, the process died before the record
    assert last_complete_checkpoint(tmp_path) == str(tmp_path / "checkpoint-10")
    (tmp_path / "checkpoint-10" / CHECKPOINT_RECORD).write_text("{")  # a damaged record proves nothing
    assert last_complete_checkpoint(tmp_path) is None
