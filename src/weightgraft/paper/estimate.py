"""Rough cost of a reproduce job, printed as its plan before any work starts.

Sizes come from the model's config when it is on disk (a parameter count on the meta device:
exact, nothing allocated, nothing downloaded), else from the published sizes of the paper's four
models (marked "estimated"). Times assume a fixed throughput per device kind (below): they say
whether a job takes minutes or days, nothing finer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from weightgraft.experiments.models import model_dir

# The paper's models by the names published_numbers.csv uses: parameters, layers, and the
# padding length of the paper's finetuning (2048 for Pythia, 512 otherwise).
PAPER_MODELS: dict[str, tuple[int, int, int]] = {
    "gpt2-xl": (1_557_611_200, 48, 512),
    "llama-3.2-1b": (1_235_814_400, 16, 512),
    "gemma-1.1-2b-it": (2_506_172_416, 18, 512),
    "pythia-2.8b": (2_775_208_960, 32, 2048),
}
# The longest finetuning text of a model that is none of the paper's four: the paper's texts are
# one sentence (under 64 tokens), so this only bounds a user's general text (--setting gentle).
DEFAULT_MAX_LENGTH = 512
_ALIASES = {"gemma-1.1-2b": "gemma-1.1-2b-it"}


@dataclass(frozen=True)
class Throughput:
    """Effective rates of one device: FLOP/s on small batches, and memory bandwidth."""

    flops: float
    bandwidth: float  # bytes/s
    note: str


THROUGHPUT = {
    "cuda": Throughput(
        1e14, 2e12, "an H100-class GPU: 100 TFLOP/s effective (mixed precision, small batches), 2 TB/s memory"
    ),
    "cpu": Throughput(2e10, 1e10, "2 CPU cores: 20 GFLOP/s, 10 GB/s memory"),
}
# Bytes touched per parameter by one AdamW step in mixed precision (fp32 weights, gradients and
# two moments read, three written, plus half-precision copies): a floor on a step's time.
_OPTIMIZER_BYTES_PER_PARAM = 34
_TRAIN_BYTES_PER_PARAM = 16  # fp32 weights, gradients, two AdamW moments (activations extra)


@dataclass(frozen=True)
class ModelSize:
    params: int
    layers: int
    source: str  # "config" or "known size (estimated)"
    max_length: int = DEFAULT_MAX_LENGTH


def paper_model_name(model: str) -> str | None:
    """The published model `model` names (hub id or folder, matched by its last part), or None."""
    name = Path(str(model).rstrip("/")).name.lower()
    name = _ALIASES.get(name, name)
    return name if name in PAPER_MODELS else None


def _local_config(model: str):
    folder = model_dir(model)
    if folder is None:
        return None
    try:
        return AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError):
        return None


def model_size(model: str) -> ModelSize | None:
    """Exact size from a config on disk, else the paper's published size, else None."""
    config = _local_config(model)
    paper = paper_model_name(model)
    max_length = PAPER_MODELS[paper][2] if paper else DEFAULT_MAX_LENGTH
    if config is not None:
        with torch.device("meta"):
            net = AutoModelForCausalLM.from_config(config, trust_remote_code=False)
        params = sum(p.numel() for p in {id(p): p for p in net.parameters()}.values())
        layers = config.get_text_config().num_hidden_layers
        return ModelSize(params, layers, "config", max_length)
    if paper:
        params, layers, max_length = PAPER_MODELS[paper]
        return ModelSize(params, layers, "known size (estimated)", max_length)
    return None


def device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def finetune_seconds(size: ModelSize, steps: int, tokens: int, device: str) -> float:
    rate = THROUGHPUT[device_kind(device)]
    compute = 6 * size.params * tokens / rate.flops
    floor = steps * _OPTIMIZER_BYTES_PER_PARAM * size.params / rate.bandwidth
    return max(compute, floor)


def run_seconds(size: ModelSize, rows: int, tokens_per_row: int, device: str, batch_tokens: int = 32768) -> float:
    """Grafted rows: a forward of the recipient and of the donor per row."""
    rate = THROUGHPUT[device_kind(device)]
    compute = 2 * 2 * size.params * rows * tokens_per_row / rate.flops
    batches = max(1, rows * tokens_per_row // batch_tokens)
    floor = batches * 2 * 4 * size.params / rate.bandwidth
    return max(compute, floor)


def train_memory_gib(size: ModelSize) -> float:
    return size.params * _TRAIN_BYTES_PER_PARAM / 2**30


def human_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
