"""What `--precision auto` finetunes in on a CPU: bf16 mixed precision where it is measured faster.

bf16 units do not make bf16 fast by themselves. On one 2-core Xeon with AVX512-BF16 (no AMX) an
optimizer step of SmolLM2-135M under bf16 autocast ran at 0.64x fp32's speed; on a 2-core AMD EPYC
with AVX512-BF16 the same step ran at 1.53x, and Gemma-3-270M's at 1.58x (docs/real_models.md),
where the finetunes' validation top-5 in bf16 stayed within fp32's spread between seeds (40-fact
SFT 0.98/0.975 against 0.97/0.92; 100-fact task model 0.79/0.99 against 0.99/0.83). So
the choice is timed on the job's own model, batch and threads before the job starts, and kept in
the job's folder so that a resumed job trains as it began. fp32 wherever bf16 units are missing
(autocast would emulate them) or the model is not on disk to be timed.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from transformers import AutoModelForCausalLM

from weightgraft.training.precision import cpu_bf16_units

# bf16 is taken only where its step beats fp32's by this factor: below it the gain is within what
# single steps vary by on a shared 2-core machine (+-25%, docs/real_models.md), and fp32 rounds less.
MIN_SPEEDUP = 1.2
TIMED_STEPS = 3  # of each precision, alternated after one untimed step of each
PROBE_TOKENS = 40  # a batch's padded length in the laptop setting (texts group by length)

CpuPrecision = Literal["fp32", "bf16"]


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision chosen and why, in words for the plan and the report."""

    precision: CpuPrecision
    reason: str
    speedup: float | None = None  # fp32's step over bf16's, where both were timed


def recorded_precision(out: Path) -> str | None:
    """The finetuning precision an existing job in `out` began with (None for a new folder)."""
    try:
        body = json.loads((Path(out) / "provenance.json").read_text())
    except (OSError, ValueError):
        return None
    precision = (body.get("recipe") or {}).get("precision")
    return precision if precision in ("fp32", "bf16") else None


def probe_setup(folder: Path, batch: int, tokens: int):
    """What a timed-step probe trains: the model in `folder` (float32, train mode), `batch` x
    `tokens` seeded random token ids of its vocabulary, and a fused AdamW at a negligible lr."""
    # here, not at the top: training.finetune brings transformers' Trainer (slow to import)
    from weightgraft.training.finetune import quiet_loading

    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, use_safetensors=True, trust_remote_code=False
        )
    model.train()
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (batch, tokens), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7, fused=True)
    return model, ids, optimizer


def bf16_step_speedup(folder: Path, batch: int, tokens: int = PROBE_TOKENS) -> float:
    """fp32's median AdamW step over bf16 autocast's, on the model in `folder` at `batch` x
    `tokens` random tokens, the two precisions alternated so that a slow moment hits both."""
    model, ids, optimizer = probe_setup(folder, batch, tokens)

    def step(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    step(False), step(True)  # allocation and oneDNN's kernel choice, untimed
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(TIMED_STEPS):
        for bf16 in (False, True):
            times[bf16].append(step(bf16))
    return statistics.median(times[False]) / statistics.median(times[True])


def choose_cpu_precision(out: Path, folder: Path | None, batch: int, measure=None) -> PrecisionChoice:
    """`--precision auto` on a CPU: the job's earlier choice, else bf16 where this CPU has bf16
    units and a step of the model in bf16 is at least `MIN_SPEEDUP` times faster, else fp32
    (`measure(folder, batch)`: the speedup, `bf16_step_speedup` unless given)."""
    earlier = recorded_precision(out)
    if earlier is not None:
        return PrecisionChoice(earlier, f"finetunes in {earlier}, as this job began (--precision auto)")
    if not cpu_bf16_units():
        return PrecisionChoice("fp32", "finetunes in fp32: this CPU has no bf16 units (--precision auto)")
    if folder is None:
        return PrecisionChoice("fp32", "finetunes in fp32: the model is not on disk to time bf16 (--precision auto)")
    speedup = (measure or bf16_step_speedup)(folder, batch)
    timed = (
        f"an optimizer step of {batch} x {PROBE_TOKENS} tokens in bf16 autocast ran at {speedup:.2f}x fp32's speed here"
    )
    if speedup >= MIN_SPEEDUP:
        return PrecisionChoice("bf16", f"finetunes in bf16 mixed precision: {timed} (--precision auto)", speedup)
    return PrecisionChoice(
        "fp32", f"finetunes in fp32: {timed}, under the {MIN_SPEEDUP}x bf16 must gain (--precision auto)", speedup
    )
