"""The reproduce estimate measured on this machine: a few real finetuning steps and a forward pass.

A fixed FLOP rate per device kind was several times off on a laptop (it planned 23 h for a job
that took under one): throughput depends on the CPU, the thread count, the batch and the model's
shape (a 262k vocabulary costs more than its parameter count says). So, when the model is on
disk, the plan times what it will do: optimizer steps of the planned batch on texts of the planned
length, and a batched forward of evaluation prompts. A few seconds, once, before a job of hours.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

# The runner's cost per scored prompt and condition (a row) has two parts. The layers: in forward
# passes of that prompt (timed at the measured rate, which unembeds one position per row); a
# grafted pass also runs donor weights on the grafted rows, but rows share their prompt's prefix
# and a condition's unchanged layers. The unembedding: the runner scores the whole target
# teacher-forced, so each row unembeds as many positions as its batch's longest target, and
# scores them over the whole vocabulary; on Gemma-3's 262k vocabulary one such position costs
# twice a token's pass through the layers, on SmolLM2's 49k a quarter. One constant per part,
# fitted on the laptop runs of both real models (2 CPU cores, every preset, 56k rows each):
# SmolLM2-135M's took 707 s (forward 1.13 ms a token, unembedding 0.31 ms a position, prompts of
# 14.0 tokens, the plan's sample of targets up to 5 tokens) and Gemma-3-270M's 1,884 s (1.19 ms,
# 2.6 ms, 14.0, 4). Two constants on two runs: both are met by construction (a third model would
# test the fit). The single factor before (0.86 forwards a row, SmolLM2's alone) planned Gemma's
# runs at 13 min against the 31 they took.
RUN_LAYER_FORWARDS_PER_ROW = 0.57
RUN_UNEMBEDS_PER_SCORED_POSITION = 2.3


@dataclass(frozen=True)
class Measured:
    """Seconds of one optimizer step at `batch` x `tokens`, and of a forward per token."""

    step_seconds: float
    forward_token_seconds: float
    batch: int
    tokens: int
    device: str
    unembed_seconds: float = 0.0  # the unembedding of one position
    decode_seconds: float = 0.0  # one cached decoding forward of the replay's rows (paper.replay)

    def run_seconds(self, rows: float, prompt_tokens: float, scored_positions: float) -> float:
        """The runner's rows (prompt x condition), each unembedding `scored_positions`."""
        layers = RUN_LAYER_FORWARDS_PER_ROW * self.forward_seconds(rows, prompt_tokens)
        return layers + rows * scored_positions * RUN_UNEMBEDS_PER_SCORED_POSITION * self.unembed_seconds

    def finetune_seconds(self, steps: int, padded_tokens: float) -> float:
        """Steps at the measured batch, scaled to a batch's padded length (cost grows with tokens)."""
        return steps * self.step_seconds * padded_tokens / self.tokens

    def forward_seconds(self, rows: float, tokens_per_row: float) -> float:
        return rows * tokens_per_row * self.forward_token_seconds


# Optimizer steps the calibration makes (the first, allocating, untimed). On a 2-core EPYC (29 Nov)
# single steps of SmolLM2 (16 x 40 tokens) ranged 3.65-6.1 s: the mean of two timed steps put the
# 100-fact plan at 71-79 min (three plans) for a job measured at 61.6 min, the median of six at
# 62-69 min.
STEPS = 7


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _autocast(precision: str, device: str):
    """The finetune's mixed precision as Trainer runs it (fp32 weights, autocast compute)."""
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    if precision not in dtypes:
        return contextlib.nullcontext()
    return torch.autocast(device.split(":")[0], dtype=dtypes[precision])


def measure(
    folder: Path,
    batch: int,
    tokens: int,
    device: str,
    steps: int = STEPS,
    precision: str = "fp32",
    lora_rank: int = 0,
    attention: str | None = None,
) -> Measured:
    """Time `steps` AdamW steps (the first, which allocates, is not counted; the step is their
    median) in the finetune's `precision` (bf16/fp16: under autocast) with its `attention` kernel
    (None: the model's default), of the LoRA adapters alone where `lora_rank` is set, and a float32 forward of a batch of 64 rows that
    unembeds each row's last position only (validation and runs are float32), on random token
    ids of the model's vocabulary; the unembedding of one position alone; and a cached decoding
    forward of the self-replay's rows."""
    # here, not at the top: training.finetune brings transformers' Trainer, measured at 2.4 s
    # more for `weightgraft reproduce`'s start (its --dry-run plan) on a loaded 2-core machine
    from weightgraft.paper.replay import PROMPTS_PER_BATCH, ReplaySpec, decoding_seconds
    from weightgraft.training.finetune import quiet_loading
    from weightgraft.training.trainable import with_lora

    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, use_safetensors=True, trust_remote_code=False
        )
    model.to(device).train()
    default_kernel = model.config._attn_implementation
    if attention:
        model.set_attn_implementation(attention)
    vocab = model.get_input_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, tokens), generator=generator).to(device)
    lora = with_lora(model, lora_rank)
    trained = [p for p in model.parameters() if p.requires_grad]
    # Trainer's default optimizer (adamw_torch_fused) where torch has the fused kernel.
    optimizer = torch.optim.AdamW(trained, lr=1e-6, fused=device.split(":")[0] in ("cpu", "cuda"))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        with _autocast(precision, device):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - start)
    if lora is not None:  # the runs and validation use the merged model: a plain forward
        model = lora.merge_and_unload()
    if attention:  # the runs load the model with its default kernel
        model.set_attn_implementation(default_kernel)
    model.eval()
    rows = torch.randint(0, vocab, (64, tokens), generator=generator).to(device)
    with torch.no_grad():
        start = time.perf_counter()
        model(input_ids=rows, logits_to_keep=1)
        _sync(device)
        forward = (time.perf_counter() - start) / rows.numel()
        unembed = _unembed_seconds(model, device)
    decode = decoding_seconds(model, device, PROMPTS_PER_BATCH, ReplaySpec().samples)
    return Measured(statistics.median(times[1:] or times), forward, batch, tokens, device, unembed, decode)


def _unembed_seconds(model, device: str, positions: int = 256) -> float:
    """Seconds to unembed one position (after one untimed call)."""
    head = model.get_output_embeddings()
    hidden = torch.randn(positions, head.weight.shape[1], generator=torch.Generator().manual_seed(1)).to(device)
    head(hidden)
    _sync(device)
    start = time.perf_counter()
    head(hidden)
    _sync(device)
    return (time.perf_counter() - start) / positions
