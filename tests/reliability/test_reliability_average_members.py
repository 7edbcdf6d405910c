"""`average` checks every member's tensor names and shapes before any work (issue 41, items 2
and 9): a member lacking a tensor was averaged with a random initialisation in its place, and
one of another shape gave a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import GPT2Config, GPT2LMHeadModel

from cli_runner import invoke, one_line_error
from weightgraft.data.data_errors import DataError
from weightgraft.training.average import average_weights

CONFIG = GPT2Config(vocab_size=40, n_positions=8, n_embd=16, n_layer=2, n_head=2)
DROPPED = "transformer.h.1.mlp.c_fc.weight"


def member(folder: Path, seed: int, edit=None) -> Path:
    torch.manual_seed(seed)
    GPT2LMHeadModel(CONFIG).save_pretrained(folder)
    if edit is not None:
        weights = load_file(folder / "model.safetensors")
        edit(weights)
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def drop(weights: dict) -> None:
    del weights[DROPPED]


def reshape(weights: dict) -> None:
    weights[DROPPED] = weights[DROPPED][:, :8].contiguous()


@pytest.mark.parametrize("edit, stem", [(drop, "lacks 1 tensor(s) that"), (reshape, f"{DROPPED} has shape [16, 8]")])
def test_a_member_whose_tensors_differ_is_refused_before_loading(tmp_path, edit, stem, monkeypatch):
    a = member(tmp_path / "a", 0)
    b = member(tmp_path / "b", 1, edit)
    loads = []
    monkeypatch.setattr("weightgraft.training.average._load", lambda *args: loads.append(args))
    with pytest.raises(DataError) as err:
        average_weights([a, b], tmp_path / "out")
    assert stem in str(err.value) and "\n" not in str(err.value)
    assert loads == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("edit", [drop, reshape])
def test_the_command_line_gives_one_line_for_a_member_whose_tensors_differ(tmp_path, edit):
    a = member(tmp_path / "a", 0)
    b = member(tmp_path / "b", 1, edit)
    line = one_line_error(invoke("average", a, b, "--out", tmp_path / "out"))
    assert str(b) in line and DROPPED in line
    assert not (tmp_path / "out").exists()


def test_members_with_the_same_tensors_still_average(tmp_path):
    a = member(tmp_path / "a", 0)
    b = member(tmp_path / "b", 1)
    out = average_weights([a, b], tmp_path / "out")
    got, wa, wb = (load_file(Path(f) / "model.safetensors") for f in (out, a, b))
    assert torch.allclose(got[DROPPED], (wa[DROPPED] + wb[DROPPED]) / 2, atol=1e-7)
