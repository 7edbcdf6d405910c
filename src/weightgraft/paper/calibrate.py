"""The reproduce estimate measured on this machine: a few real finetuning steps and a forward pass.

A fixed FLOP rate per device kind was several times off on a laptop (it planned 23 h for a job
that took under one): throughput depends on the CPU, the thread count, the batch and the model's
shape (a 262k vocabulary costs more than its parameter count says). So, when the model is on
disk, the plan times what it will do: optimizer steps of the planned batch on texts of the planned
length, and a batched forward of evaluation prompts. A few seconds, once, before a job of hours.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

# The runner's cost per scored prompt and condition, in forward passes of that prompt that
# unembed only its last position (as the runner does: only scored positions reach the
# unembedding): a grafted pass runs the recipient's and the donors' weights on the grafted rows,
# but rows share their prompt's prefix and a condition's unchanged layers. Fitted on SmolLM2-135M's
# laptop job (2 CPU cores, every preset, 58k rows): its runs took 811 s, 0.67 of plain forwards
# with every position unembedded at the quiet machine's rate (1.49 ms a token), and such a
# forward costs 1.28 times one that unembeds the last position only (1.58 against 1.23 ms,
# measured side by side): 0.67 x 1.28 = 0.86. On Gemma-3's 262k vocabulary the ratio is 2.7, which
# is why the forward is timed the runner's way.
RUN_FORWARDS_PER_ROW = 0.86


@dataclass(frozen=True)
class Measured:
    """Seconds of one optimizer step at `batch` x `tokens`, and of a forward per token."""

    step_seconds: float
    forward_token_seconds: float
    batch: int
    tokens: int
    device: str

    def finetune_seconds(self, steps: int, padded_tokens: float) -> float:
        """Steps at the measured batch, scaled to a batch's padded length (cost grows with tokens)."""
        return steps * self.step_seconds * padded_tokens / self.tokens

    def forward_seconds(self, rows: float, tokens_per_row: float) -> float:
        return rows * tokens_per_row * self.forward_token_seconds


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def measure(folder: Path, batch: int, tokens: int, device: str, steps: int = 3) -> Measured:
    """Time `steps` AdamW steps (the first, which allocates, is not counted) and a forward of a
    batch of 64 rows that unembeds each row's last position only, on random token ids of the
    model's vocabulary, in float32."""
    # here, not at the top: training.finetune brings transformers' Trainer, measured at 2.4 s
    # more for `weightgraft reproduce`'s start (its --dry-run plan) on a loaded 2-core machine
    from weightgraft.training.finetune import quiet_loading

    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, use_safetensors=True, trust_remote_code=False
        )
    model.to(device).train()
    vocab = model.get_input_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, tokens), generator=generator).to(device)
    # Trainer's default optimizer (adamw_torch_fused) where torch has the fused kernel.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6, fused=device.split(":")[0] in ("cpu", "cuda"))
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - start)
    model.eval()
    rows = torch.randint(0, vocab, (64, tokens), generator=generator).to(device)
    with torch.no_grad():
        start = time.perf_counter()
        model(input_ids=rows, logits_to_keep=1)
        _sync(device)
        forward = (time.perf_counter() - start) / rows.numel()
    return Measured(sum(times[1:]) / max(1, len(times) - 1), forward, batch, tokens, device)
