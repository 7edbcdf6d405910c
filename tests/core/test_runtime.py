"""weightgraft.runtime: the one place that answers rank, home, device and hashing."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from weightgraft import runtime


def test_home_follows_the_variable_and_falls_back_to_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "cache"))
    assert runtime.home() == tmp_path / "cache"
    monkeypatch.setenv("WEIGHTGRAFT_HOME", "")  # set but empty counts as unset
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert runtime.home() == tmp_path / "user" / ".cache" / "weightgraft"
    monkeypatch.delenv("WEIGHTGRAFT_HOME")
    assert runtime.home() == tmp_path / "user" / ".cache" / "weightgraft"


def test_every_home_reader_agrees(monkeypatch, tmp_path):
    from weightgraft.experiments.models import hash_cache_file
    from weightgraft.training.builtin import default_home

    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path))
    assert default_home() == tmp_path
    assert hash_cache_file() == tmp_path / "file-hashes.json"


def test_rank_from_the_launcher_environment(monkeypatch):
    from weightgraft.experiments.shards import shard_from_env

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert (runtime.rank(), runtime.world_size(), runtime.local_rank()) == (0, 1, 0)
    assert runtime.is_main_process() and runtime.launch_shard() is None and shard_from_env() is None
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert (runtime.rank(), runtime.world_size(), runtime.local_rank()) == (3, 4, 1)
    assert not runtime.is_main_process()
    assert runtime.launch_shard() == shard_from_env() == (3, 4)
    monkeypatch.setenv("WORLD_SIZE", "1")  # one process: no shard, whatever RANK says
    assert runtime.launch_shard() is None


def test_rank_from_a_process_group_overrides_the_environment(monkeypatch, tmp_path):
    import torch.distributed as dist

    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "9")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        assert (runtime.rank(), runtime.world_size(), runtime.launch_shard()) == (0, 1, None)
    finally:
        dist.destroy_process_group()
    assert (runtime.rank(), runtime.world_size()) == (5, 9)


def test_auto_device_is_cuda_only_when_torch_sees_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runtime.resolve_device("auto") == "cpu"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runtime.resolve_device("auto") == "cuda"
    for name in ("cpu", "cuda:1", "mps"):
        assert runtime.resolve_device(name) == name


def test_hashes_match_hashlib(tmp_path):
    path = tmp_path / "blob"
    body = bytes(range(256)) * 9000  # more than one 1 MiB block
    path.write_bytes(body)
    assert runtime.sha256_file(path) == hashlib.sha256(body).hexdigest()
    obj = {"b": [1, 2], "a": Path("/x")}
    assert runtime.sha256_json(obj) == hashlib.sha256(b'{"a": "/x", "b": [1, 2]}').hexdigest()
    assert runtime.sha256_json({"a": "/x", "b": [1, 2]}) == runtime.sha256_json(obj)
    assert json.dumps(obj, sort_keys=True, default=str) == '{"a": "/x", "b": [1, 2]}'


def test_runtime_imports_without_torch():
    code = "import sys, weightgraft.runtime; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_the_data_command_starts_without_torch():
    """`main` imports only the module of the command it runs, and the data module pulls no torch."""
    code = (
        "import sys\n"
        "sys.argv = ['weightgraft', 'data', '--help']\n"
        "from weightgraft.cli import main\n"
        "try:\n    main()\nexcept SystemExit as done:\n    assert done.code == 0, done.code\n"
        "print('torch loaded' if 'torch' in sys.modules else 'no torch', file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--facts-per-kind" in out.stdout
    assert out.stderr.strip().splitlines()[-1] == "no torch"


def test_one_device_check_for_names_and_presence(monkeypatch):
    assert runtime.check_device("cuda:3") == "cuda:3"  # a name only: not looked for
    assert runtime.check_device("auto", auto=True, here=True) == "auto"
    for name, forms in (("auto", "cpu, cuda"), ("meta", "cpu, cuda"), ("gpu", "cpu, cuda")):
        with pytest.raises(ValueError, match=f"'{name}' is not a device; use {forms}"):
            runtime.check_device(name)
    with pytest.raises(ValueError, match="use auto, cpu"):
        runtime.check_device("banana", auto=True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="asks for a GPU, but torch sees no CUDA device"):
        runtime.check_device("cuda", here=True)
    assert runtime.check_device("cpu", here=True) == "cpu"
