"""The distilled loss's cost (`general_loss="kl"`), measured in one run and printed as ratios.

One optimizer step (forward, backward, AdamW; bf16 autocast where the CPU has bf16 units, as the
laptop setting trains) of a batch of 16 rows, 4 of them general text (replay share 0.25), of
lengths 30 to 45 padded right, as a real batch is. Three losses, alternated so that a slow moment
of a shared machine hits all of them:
- `tokens`: the plain causal LM loss over labelled positions (`labelled_loss`);
- `kl, masks`: the distilled loss as first written, each part of the logits taken with a boolean
  mask over [positions, vocab] (kept here only as the "before");
- `kl`: `training.distill.distilled_loss`, facts' and general positions unembedded as two
  contiguous blocks.
Their losses and gradients agree (the first assertion); the ratios are of median step times.

Usage: python benchmarks/bench_distill.py [--model smollm2-135m] [--reps 10] [--out benchmarks/results/distill.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

from weightgraft.experiments.models import model_dir
from weightgraft.training.batches import PadCollator, TextDataset, labelled_logits, labelled_loss
from weightgraft.training.distill import distilled_loss, frozen_copy
from weightgraft.training.precision import cpu_bf16_units

ROOT = Path(__file__).resolve().parents[1]


def masked_distilled_loss(model, base, inputs: dict):
    """The first distilled loss: boolean masks pick the facts' and the general positions."""
    targets = inputs["labels"][:, 1:]
    labelled = targets != -100
    logits, _ = labelled_logits(model, inputs, labelled)
    logits = logits.float()
    general = inputs["general"].bool()
    general_at = general[labelled.nonzero()[:, 0]]
    loss = F.cross_entropy(logits[~general_at], targets[labelled][~general_at], reduction="sum")
    rows = {"input_ids": inputs["input_ids"][general], "attention_mask": inputs["attention_mask"][general]}
    with torch.no_grad():
        teacher, _ = labelled_logits(base, rows, labelled[general])
    loss = loss + F.kl_div(
        F.log_softmax(logits[general_at], dim=-1),
        F.log_softmax(teacher.float(), dim=-1),
        log_target=True,
        reduction="sum",
    )
    return loss / labelled.sum()


def batch(vocab: int, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(30, 46, (16,), generator=generator).tolist()
    rows = [torch.randint(1, vocab, (n,), generator=generator).tolist() for n in lengths]
    general = [i % 4 == 3 for i in range(16)]
    dataset = TextDataset(rows, general)
    return PadCollator(pad_id=0)([dataset[i] for i in range(16)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "distill.json")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir(args.model), dtype=torch.float32).train()
    base = frozen_copy(model)
    inputs = batch(model.get_input_embeddings().weight.shape[0])
    bf16 = cpu_bf16_units()
    context = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext
    losses = {
        "tokens": lambda: labelled_loss(model, inputs)[0],
        "kl, masks": lambda: masked_distilled_loss(model, base, inputs),
        "kl": lambda: distilled_loss(model, base, inputs)[0],
    }

    grads = {}
    for name in ("kl, masks", "kl"):
        model.zero_grad(set_to_none=True)
        with context():
            value = losses[name]()
        value.backward()
        grads[name] = (value.item(), [p.grad.clone() for p in model.parameters()])
    (v0, g0), (v1, g1) = grads.values()
    assert abs(v0 - v1) <= 1e-4 * abs(v0), (v0, v1)
    worst = max(((a - b).abs().max() / (a.abs().max() + 1e-12)).item() for a, b in zip(g0, g1))
    assert worst < 1e-2, worst  # bf16 autocast: the same computation up to rounding
    model.zero_grad(set_to_none=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    times: dict[str, list[float]] = {name: [] for name in losses}
    for rep in range(args.reps + 1):
        for name, compute in losses.items():
            start = time.perf_counter()
            with context():
                value = compute()
            value.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if rep:  # the first round warms up
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    tokens = int(inputs["attention_mask"].sum())
    result = {
        "model": args.model,
        "precision": "bf16 autocast" if bf16 else "fp32",
        "batch": list(inputs["input_ids"].shape),
        "general_rows": int(inputs["general"].sum()),
        "median_step_s": medians,
        "tokens_per_s": {name: tokens / m for name, m in medians.items()},
        "ratio_to_tokens": {name: m / medians["tokens"] for name, m in medians.items()},
        "masks_over_blocks": medians["kl, masks"] / medians["kl"],
        "loss_values": {"kl, masks": v0, "kl": v1},
        "worst_relative_grad_difference": worst,
        "reps": args.reps,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, m in medians.items():
        print(f"{name:>10}: {m:.3f} s/step, {tokens / m:,.0f} tokens/s, {m / medians['tokens']:.2f}x the plain step")
    print(f"masks / blocks: {result['masks_over_blocks']:.2f}x")


if __name__ == "__main__":
    main()
