"""Every reused file is checked against the sha256 recorded when it was written (issue 41, item 1).

Each test flips one byte of a file weightgraft wrote and puts its mtime back (bit rot, or
`cp -p` of a damaged copy): size and mtime then say "unchanged", and only the hash can tell."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from weightgraft.atomic import write_json
from weightgraft.experiments.models import check_model_files
from weightgraft.folder_install import atomic_directory
from weightgraft.folder_ownership import OWNED_RECORD
from weightgraft.ledger import Ledger
from weightgraft.recorded import DamagedFileError
from weightgraft.runtime import sha256_file
from weightgraft.training.checkpoints import intact_checkpoint, seal_checkpoint


def flip_byte_keep_mtime(path: Path, offset: int = -1) -> None:
    """One byte of `path` changed in place, size and mtime as they were."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size


def test_a_ledger_step_whose_output_changed_with_its_mtime_kept_is_done_again(tmp_path):
    out = tmp_path / "step.bin"
    out.write_bytes(os.urandom(4096))
    ledger = Ledger(tmp_path / "provenance.json", {}, base=tmp_path)
    ledger.finish("step", {"a": 1}, {}, [out], started=0.0)
    assert ledger.is_done("step", {"a": 1})
    flip_byte_keep_mtime(out, 2000)
    again = Ledger(tmp_path / "provenance.json", {}, base=tmp_path)  # a later process reads the record
    assert not again.is_done("step", {"a": 1})
    assert again.changed_outputs("step") == [out]


def test_a_checkpoint_changed_with_its_mtime_kept_is_not_resumed_from(tmp_path):
    folder = tmp_path / "checkpoint-4"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(os.urandom(2048))
    seal_checkpoint(folder)
    assert intact_checkpoint(folder)
    flip_byte_keep_mtime(folder / "model.safetensors", 100)
    assert not intact_checkpoint(folder)


def test_a_model_folder_that_differs_from_its_record_is_refused_before_loading(tmp_path):
    out = tmp_path / "model"
    with atomic_directory(out, command="train") as tmp:
        save_file({"w": torch.arange(64, dtype=torch.float32)}, str(tmp / "model.safetensors"))
        write_json(tmp / "config.json", {"model_type": "gpt2"})
    assert check_model_files(str(out)) == out.resolve()
    flip_byte_keep_mtime(out / "model.safetensors")
    with pytest.raises(DamagedFileError) as err:
        check_model_files(str(out))
    message = str(err.value)
    assert "\n" not in message and str(out / "model.safetensors") in message
    assert "weightgraft train" in message and OWNED_RECORD in message


def test_the_builtin_pretrained_model_changed_with_its_mtime_kept_is_rebuilt_with_one_line(tmp_path, capsys):
    from weightgraft.training.builtin import LEDGER_NAME, ensure_builtin

    torch.manual_seed(0)
    art = ensure_builtin("tiny", home=tmp_path, progress=False, finetunes=False)
    weights = art.pretrained / "model.safetensors"
    good = sha256_file(weights)
    flip_byte_keep_mtime(weights)
    capsys.readouterr()
    ensure_builtin("tiny", home=tmp_path, progress=False, finetunes=False)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and str(weights) in lines[0] and "rebuilding the pretrained model" in lines[0]
    assert sha256_file(weights) == good  # rebuilt: the same bytes as the first build
    steps = json.loads((art.root / LEDGER_NAME).read_text())["steps"]
    assert steps["pretrained model"]["hashes"]["models/pretrained/model.safetensors"]["sha256"] == good


def test_a_converted_gguf_model_changed_with_its_mtime_kept_is_converted_again_with_one_line(
    tmp_path, monkeypatch, capsys
):
    pytest.importorskip("gguf", reason="the GGUF tests need the `gguf` package")
    from tiny_gguf import write_tiny_llama_gguf
    from weightgraft.pretrained import resolve_name

    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(resolve_name, "_resolved", {})
    gguf = write_tiny_llama_gguf(tmp_path / "tiny-llama.gguf", seed=3)
    folder = resolve_name.resolve_pretrained(str(gguf))
    weights = folder / "model.safetensors"
    good = weights.read_bytes()
    flip_byte_keep_mtime(weights)
    assert not resolve_name.intact(folder)
    capsys.readouterr()
    assert resolve_name.resolve_pretrained(str(gguf)) == folder  # the same process: its memo is checked too
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and str(weights) in lines[0] and "converting again" in lines[0]
    assert weights.read_bytes() == good
