"""The tiny built-in pipeline, built once per test process in a temporary home."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def tiny_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="weightgraft-test-home-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


@lru_cache(maxsize=1)
def tiny_artifacts():
    import torch

    from weightgraft.training.builtin import ensure_builtin

    torch.manual_seed(0)
    return ensure_builtin("tiny", home=tiny_home(), progress=False)


@lru_cache(maxsize=8)
def accuracy(model_dir: str, data_dir: str, split: str = "eval", k: int = 5) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from weightgraft.data.io import load_eval_prompts
    from weightgraft.training.evaluate import topk_accuracy

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return topk_accuracy(model, tokenizer, load_eval_prompts(Path(data_dir), split), k=k)
