"""The explorer on the tests' tiny world (tests/support/tiny_world.py): tiny Llama models saved as
folders with a tokenizer, a dataset with roles, and an explorer session served from a thread."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

import tiny_world
from exp_fixtures import ReferenceGrafter, build_models

DONORS = ("sft", "task")
# The grid's groups in Llama's engine components, written out here (not asked of weightgraft).
LLAMA_GROUPS = {
    "EMB": ["embed"],
    "ATTN": ["q", "k", "v"],
    "O": ["o"],
    "FFN": ["gate", "up", "down"],
    "NORMS": ["ln1", "ln2"],
    "FNORM": ["ln_final"],
    "UNEMB": ["lm_head"],
}
EVERY_WEIGHT = ["embed", "q", "k", "v", "o", "gate", "up", "down", "ln1", "ln2"]


@lru_cache(maxsize=1)
def world(root: Path) -> tuple[dict[str, str], Path]:
    """Model folders (pre, sft, task, b2a) and the dataset folder, built once per root."""
    torch.manual_seed(0)
    paths = build_models(root / "models")
    data = root / "data"
    tiny_world.write_dataset(data)
    return paths, data


def open_world_session(root: Path):
    from weightgraft.explore.open_session import open_session

    paths, data = world(root)
    return open_session(paths["pre"], {d: paths[d] for d in DONORS}, data)


def world_reference(root: Path) -> ReferenceGrafter:
    """The independent reference grafter on the world's models: the recipient and both donors."""
    from weightgraft.experiments.models import load_model

    paths, _ = world(root)
    return ReferenceGrafter(
        load_model(paths["pre"], "cpu", "float32"), {d: load_model(paths[d], "cpu", "float32") for d in DONORS}
    )


@lru_cache(maxsize=4)
def moe_world(root: Path, arch: str = "mixtral") -> tuple[dict[str, str], Path]:
    """A tiny mixture-of-experts pair (`tiny_model_fixtures.make_pair`: recipient pre, donor sft,
    3 layers of 4 experts, 2 picked per token) over the tiny world's tokenizer, saved as folders
    with it, and the world's dataset."""
    from tiny_model_fixtures import make_pair
    from tiny_world import build_tokenizer

    tokenizer = build_tokenizer()
    pre, sft = make_pair(arch, 0, vocab_size=len(tokenizer), bos_token_id=1, pad_token_id=0)
    paths = {}
    for name, model in (("pre", pre), ("sft", sft)):
        path = root / "models" / name
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[name] = str(path)
    data = root / "data"
    tiny_world.write_dataset(data)
    return paths, data


def open_moe_session(root: Path, arch: str = "mixtral"):
    from weightgraft.explore.open_session import open_session

    paths, data = moe_world(root, arch)
    return open_session(paths["pre"], {"sft": paths["sft"]}, data)
