"""Model files: fingerprints that see every byte (issue 9, item 2) and checkpoints that must hold
exactly the tensors their config asks for, as safetensors (item 3)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch
from safetensors.torch import load_file, save_file

from weightgraft.errors import UserError
from weightgraft.experiments import models


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))


def counting_hasher(monkeypatch) -> list:
    calls = []
    real = models.sha256_file

    def counted(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(models, "sha256_file", counted)
    return calls


def test_a_changed_middle_byte_changes_the_fingerprint_and_is_hashed_once(tmp_path, monkeypatch):
    # Old code sampled files above 256 MiB (first and last 16 MiB); a small limit stands in.
    monkeypatch.setattr(models, "_BIG", 2**20, raising=False)
    folder = tmp_path / "model"
    folder.mkdir()
    weights = folder / "model.safetensors"
    data = bytearray(os.urandom(40 * 2**20))
    weights.write_bytes(data)
    (folder / "config.json").write_text("{}")
    calls = counting_hasher(monkeypatch)

    first = models.fingerprint_model(str(folder))
    assert len(calls) == 2  # weights and config
    assert models.model_file_hashes(str(folder))["model.safetensors"] == hashlib.sha256(data).hexdigest()
    assert models.fingerprint_model(str(folder)) == first and len(calls) == 2  # from the cache

    # One byte in the middle, with the same size and the old modification time put back.
    stat = weights.stat()
    data[20 * 2**20] ^= 0xFF
    weights.write_bytes(data)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    second = models.fingerprint_model(str(folder))
    assert second != first
    assert calls[2:] == [weights]  # only the changed file was hashed again
    assert models.model_file_hashes(str(folder))["model.safetensors"] == hashlib.sha256(data).hexdigest()
    cache = json.loads(models.hash_cache_file().read_text())
    assert cache[str(weights.resolve())]["sha256"] == hashlib.sha256(data).hexdigest()


def tiny_model(path, tie: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(path)
    return model


def test_missing_and_unexpected_tensors_are_errors_naming_them(tmp_path):
    tiny_model(tmp_path / "m")
    path = tmp_path / "m" / "model.safetensors"
    tensors = load_file(path)
    tensors.pop("model.layers.1.mlp.up_proj.weight")
    tensors["model.layers.1.mlp.extra.weight"] = torch.zeros(3)
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(UserError) as err:
        models.load_model(str(tmp_path / "m"), "cpu", "float32", field="models.sft")
    text = str(err.value)
    assert text.startswith("models.sft: ")
    assert "1 missing tensor(s) model.layers.1.mlp.up_proj.weight" in text
    assert "1 unexpected tensor(s) model.layers.1.mlp.extra.weight" in text


def test_a_wrong_shape_is_an_error_and_tied_weights_load(tmp_path):
    reference = tiny_model(tmp_path / "tied", tie=True)
    assert "lm_head.weight" not in load_file(tmp_path / "tied" / "model.safetensors")
    loaded = models.load_model(str(tmp_path / "tied"), "cpu", "float32")
    assert torch.equal(loaded.lm_head.weight, reference.model.embed_tokens.weight)

    tiny_model(tmp_path / "m")
    path = tmp_path / "m" / "model.safetensors"
    tensors = load_file(path)
    tensors["model.layers.0.mlp.down_proj.weight"] = torch.zeros(16, 31)
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(UserError, match="1 wrong-shape tensor.s. model.layers.0.mlp.down_proj.weight"):
        models.load_model(str(tmp_path / "m"), "cpu", "float32")


def test_pickled_only_checkpoints_are_refused(tmp_path):
    model = tiny_model(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "m" / "pytorch_model.bin")
    with pytest.raises(UserError, match=r"only pickled weights \(.bin/.pt\).*safe_serialization=True"):
        models.load_model(str(tmp_path / "m"), "cpu", "float32")
