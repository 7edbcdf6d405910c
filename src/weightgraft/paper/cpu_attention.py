"""What `--attention auto` finetunes with on a CPU: the eager attention kernel where it is measured faster.

The profiler of a bf16 SmolLM2-135M step of 16 x 39 tokens on a 2-core EPYC put an eighth of the
step in the backward of torch's fused CPU attention (sdpa). At the laptop setting's short texts
the plain matmul-and-softmax attention ("eager") does the same arithmetic with less overhead: a
step ran 1.15x faster at 39 tokens and 1.23x at 60, while Gemma-3-270M's ran at 0.99x (no gain;
docs/real_models.md). So, as with bf16 (`paper.cpu_precision`), the kernel is timed on the job's
own model, batch and precision before the job starts and kept in the job's folder, so that a
resumed job trains as it began. Either kernel computes the same attention (tests compare the
losses); the choice is speed, not method.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from weightgraft.paper.cpu_precision import PROBE_TOKENS, probe_setup
from weightgraft.training import ATTENTION_KERNELS

# eager is taken only where its step beats sdpa's by this factor. Lower than bf16's 1.2x: eager
# rounds no more than sdpa, so a wrong choice costs at most a little time. Four probes of
# SmolLM2-135M on one quiet 2-core EPYC measured 1.09-1.23x (a 1.1x bar chose sdpa once); Gemma-3-270M 0.99x.
MIN_SPEEDUP = 1.05
TIMED_STEPS = 3  # of each kernel, alternated after one untimed step of each


@dataclass(frozen=True)
class AttentionChoice:
    """The kernel chosen (None: the model's default, sdpa where it has it) and why, in words."""

    kernel: str | None
    reason: str
    speedup: float | None = None  # sdpa's step over eager's, where both were timed


def recorded_attention(out: Path) -> tuple[bool, str | None]:
    """(whether a job in `out` began already, the kernel it began with): a job begun before
    the choice existed recorded none and keeps the default, so that its finished steps stay done."""
    try:
        body = json.loads((Path(out) / "provenance.json").read_text())
    except (OSError, ValueError):
        return False, None
    kernel = (body.get("recipe") or {}).get("attention")
    return True, kernel if kernel in ATTENTION_KERNELS else None


def kernel_step_seconds(
    folder: Path, batch: int, precision: str, tokens: int = PROBE_TOKENS, timed: int = TIMED_STEPS
) -> dict[str, float]:
    """The median seconds of an AdamW step with each kernel, on the model in `folder` at `batch` x
    `tokens` random tokens (the last rows padded, as a real batch) in `precision`, the two kernels
    alternated on one model (`timed` steps each, after one untimed) so that a slow moment hits both."""
    model, ids, optimizer = probe_setup(folder, batch, tokens)
    mask = torch.ones_like(ids)
    mask[batch // 2 :, -(tokens // 8) :] = 0
    labels = ids.masked_fill(mask == 0, -100)
    bf16 = precision == "bf16"

    def step(kernel: str) -> float:
        model.set_attn_implementation(kernel)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    times: dict[str, list[float]] = {kernel: [] for kernel in ATTENTION_KERNELS}
    for kernel in times:  # allocation and oneDNN's kernel choice, untimed
        step(kernel)
    for _ in range(timed):
        for kernel in times:
            times[kernel].append(step(kernel))
    return {kernel: statistics.median(seconds) for kernel, seconds in times.items()}


def eager_step_speedup(folder: Path, batch: int, precision: str, tokens: int = PROBE_TOKENS) -> float:
    """sdpa's median step over eager's (`kernel_step_seconds`)."""
    seconds = kernel_step_seconds(folder, batch, precision, tokens)
    return seconds["sdpa"] / seconds["eager"]


def choose_cpu_attention(out: Path, folder: Path | None, batch: int, precision: str, measure=None) -> AttentionChoice:
    """`--attention auto` on a CPU: the job's earlier choice, else eager where a step of the model
    with it is at least `MIN_SPEEDUP` times faster than with sdpa, else the model's default
    (`measure(folder, batch, precision)`: the speedup, `eager_step_speedup` unless given)."""
    begun, earlier = recorded_attention(out)
    if begun:
        kernel = earlier or "the model's default"
        return AttentionChoice(earlier, f"attention kernel: {kernel}, as this job began (--attention auto)")
    if folder is None:
        return AttentionChoice(
            None, "attention kernel: the model's default; it is not on disk to time (--attention auto)"
        )
    try:
        speedup = (measure or eager_step_speedup)(folder, batch, precision)
    except ValueError as error:  # transformers refuses a kernel the architecture lacks
        return AttentionChoice(
            None, f"attention kernel: the model's default; the other could not be timed ({error}) (--attention auto)"
        )
    timed = f"an optimizer step of {batch} x {PROBE_TOKENS} tokens ({precision}) with eager attention ran at {speedup:.2f}x sdpa's speed here"
    if speedup >= MIN_SPEEDUP:
        return AttentionChoice("eager", f"attention kernel: eager, {timed} (--attention auto)", speedup)
    return AttentionChoice(
        None,
        f"attention kernel: the model's default, {timed}, under the {MIN_SPEEDUP}x eager must gain (--attention auto)",
        speedup,
    )
