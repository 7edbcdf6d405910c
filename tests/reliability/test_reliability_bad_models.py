"""Bad model files and homes are one line naming the real cause, with nothing left in the home
(issue 41, items 7, 8 and 10): a `.gguf` of random bytes, empty, of an architecture transformers
does not read, or cut short, through `train`, `reproduce` and `explore`; a read-only home; a
full home, which safetensors reports in its own words."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="the GGUF tests need the `gguf` package (pip install 'weightgraft[real]')")

from safetensors import SafetensorError  # noqa: E402

from cli_runner import invoke, one_line_error  # noqa: E402
from data_fixtures import small_facts  # noqa: E402
from tiny_gguf import write_tiny_llama_gguf  # noqa: E402
from weightgraft.pretrained import resolve_name  # noqa: E402


def bad_gguf(folder: Path, kind: str) -> Path:
    path = folder / f"{kind}.gguf"
    if kind == "random":
        path.write_bytes(os.urandom(4096))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind in ("bert", "madeup"):
        write_tiny_llama_gguf(path, architecture=kind)
    else:  # truncated: the first half of a whole file
        whole = write_tiny_llama_gguf(folder / "whole.gguf").read_bytes()
        path.write_bytes(whole[: len(whole) // 2])
    return path


STEMS = {
    "random": "cannot be read as a model (GGUF magic invalid)",
    "empty": "cannot be read as a model (cannot mmap an empty file)",
    "bert": "holds a model of architecture 'bert', which transformers does not read from GGUF",
    "madeup": "holds a model of architecture 'madeup', which transformers does not read from GGUF",
    "truncated": "cannot be read as a model (",
}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    from weightgraft.data.build import build_dataset

    return Path(build_dataset(tmp_path_factory.mktemp("data") / "set", small_facts()[1][:6], seed=0, texts_per_fact=2))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(resolve_name, "_resolved", {})
    return tmp_path / "home"


def left_in(home: Path) -> list[str]:
    """What a refused first use left in the home's folder of converted models."""
    folder = home / "pretrained"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def command(name: str, model: Path, tmp_path: Path, data: Path) -> list:
    if name == "train":
        return ["train", "--model", model, "--data", data, "--out", tmp_path / "out"]
    if name == "reproduce":
        return ["reproduce", "--model", model, "--out", tmp_path / "job", "--dry-run"]
    return ["explore", "--recipient", model, "--donor", tmp_path / "donor", "--port", "0"]


@pytest.mark.parametrize("kind", sorted(STEMS))
@pytest.mark.parametrize("name", ["train", "reproduce", "explore"])
def test_a_bad_gguf_is_one_line_and_leaves_no_lock(tmp_path, home, dataset, kind, name):
    model = bad_gguf(tmp_path, kind)
    (tmp_path / "donor").mkdir()
    line = one_line_error(invoke(*command(name, model, tmp_path, dataset)))
    assert str(model) in line and STEMS[kind] in line, line
    assert left_in(home) == []


def test_a_full_home_says_no_space_not_a_damaged_model(tmp_path, home, dataset, monkeypatch):
    import transformers.modeling_utils

    def full(*args, **kwargs):
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    model = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    outcome = invoke("train", "--model", model, "--data", dataset, "--out", tmp_path / "out")
    errors = [line for line in outcome.lines if line.startswith("error:")]  # after the conversion's progress
    assert outcome.code == 2 and errors == [outcome.lines[-1]], outcome.lines
    assert errors[0].startswith("error: no space left on the device;") and "damaged" not in errors[0]
    assert left_in(home) == []


def test_a_read_only_home_is_one_line_naming_it(tmp_path, home, monkeypatch):
    real = Path.mkdir

    def refused(self, *args, **kwargs):
        if str(self).startswith(str(home)):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refused)
    model = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    for args in (
        ["reproduce", "--model", model, "--out", tmp_path / "job", "--dry-run"],
        ["demo", "--size", "tiny", "--out", tmp_path / "demo", "--no-progress"],
    ):
        line = one_line_error(invoke(*args))
        assert "is on a read-only file system; give a writable --out, and set WEIGHTGRAFT_HOME" in line
        assert str(home) in line
