"""Attribution benchmarks, measured in one run on this machine and printed as ratios.

(a) gradient attribution of every cell (position x layer x component) against one plain
    forward+backward pass of the recipient on the same batch and metric (target: <= 3);
(b) integrated attribution (16 steps) against the same pass (target: about `steps`);
(c) exhaustive single-cell grafting (one engine-grafted row per cell, prefix sharing on) against
    (a) and (b). Grafting all cells would take hours on a CPU, so a seeded sample of cells at
    positions spread over the prompt is timed and the time per cell is scaled to every cell.

The model is GPT-2-small-shaped (12 layers, 768 wide, 50257 tokens) with random weights.
Usage: python benchmarks/bench_attribution.py [--quick] [--out benchmarks/results/attribution.json]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from weightgraft import Grafter
from weightgraft.attribution import attribute, exact_cell_effects

ROOT = Path(__file__).resolve().parents[1]

BATCH, SEQ, STEPS = 2, 32, 16


def make_models(quick: bool):
    layers, hidden, heads = (4, 256, 4) if quick else (12, 768, 12)

    def build(seed: int):
        torch.manual_seed(seed)
        config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=50257, n_positions=1024)
        return GPT2LMHeadModel(config).eval()

    return build(0), build(1)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def plain_forward_backward(model, ids: torch.Tensor, targets: torch.Tensor) -> None:
    """The yardstick: one forward and one backward of the same metric (parameter gradients)."""
    logits = model(input_ids=ids).logits[:, -1]
    torch.log_softmax(logits.float(), -1).gather(1, targets[:, None]).sum().backward()
    for p in model.parameters():
        p.grad = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a 4-layer, 256-wide model: a smoke run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--sample-cells", type=int, default=96, help="cells grafted one at a time for (c)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "attribution.json")
    args = parser.parse_args()

    recipient, donor = make_models(args.quick)
    grafter = Grafter(recipient, donor)
    torch.manual_seed(0)
    ids = torch.randint(100, 30000, (BATCH, SEQ))
    targets = torch.randint(100, 30000, (BATCH,))
    plain_forward_backward(recipient, ids, targets)  # warm-up

    # (a) and (b): alternate the yardstick and the attribution so that a slow moment of the
    # machine hits both sides of a ratio; take the median ratio.
    plain_times, grad_ratios, grad_times = [], [], []
    for _ in range(args.reps):
        plain_times.append(timed(lambda: plain_forward_backward(recipient, ids, targets)))
        grad_times.append(timed(lambda: attribute(grafter, ids, targets, method="gradient")))
        grad_ratios.append(grad_times[-1] / plain_times[-1])
    before = timed(lambda: plain_forward_backward(recipient, ids, targets))
    integrated_time = timed(lambda: attribute(grafter, ids, targets, method="integrated", steps=STEPS))
    after = timed(lambda: plain_forward_backward(recipient, ids, targets))
    integrated_ratio = integrated_time / statistics.mean([before, after])

    # (c) a seeded sample of single cells, spread over positions, layers and components.
    layout = attribute(grafter, ids[:1, :2], targets[:1])
    per_position = [(layer, c) for layer in range(grafter.num_layers) for c in layout.layer_components]
    per_position += [(None, c) for c in layout.model_components]
    all_cells = BATCH * SEQ * len(per_position)
    rng = random.Random(0)
    sample = [(rng.randrange(BATCH), rng.randrange(SEQ), *rng.choice(per_position)) for _ in range(args.sample_cells)]
    exact_cell_effects(grafter, ids, targets, sample[:4])  # warm-up
    exact_seconds = timed(lambda: exact_cell_effects(grafter, ids, targets, sample))
    exhaustive = exact_seconds / len(sample) * all_cells
    gradient = statistics.median(grad_times)

    params = sum(p.numel() for p in recipient.parameters())
    results = {
        "model": f"GPT-2-small-shaped random, {params / 1e6:.0f}M parameters" + (" (quick)" if args.quick else ""),
        "batch": BATCH,
        "seq": SEQ,
        "steps": STEPS,
        "cells": all_cells,
        "plain_forward_backward_s": statistics.median(plain_times),
        "gradient_s": gradient,
        "integrated_s": integrated_time,
        "exhaustive_single_cell_s_estimated": exhaustive,
        "sampled_cells": len(sample),
        "a_gradient_over_forward_backward": statistics.median(grad_ratios),
        "b_integrated_over_forward_backward": integrated_ratio,
        "c_exhaustive_over_gradient": exhaustive / gradient,
        "c_exhaustive_over_integrated": exhaustive / integrated_time,
    }
    print(
        f"\n{results['model']}; batch {BATCH} x {SEQ} tokens = {all_cells} cells; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, CPU"
    )
    rows = [
        ("a_gradient_over_forward_backward", "(a) gradient attribution / plain fwd+bwd", "<= 3"),
        ("b_integrated_over_forward_backward", f"(b) integrated ({STEPS} steps) / plain fwd+bwd", f"~ {STEPS}"),
        ("c_exhaustive_over_gradient", "(c) exhaustive single-cell grafting / gradient", ""),
        ("c_exhaustive_over_integrated", "    exhaustive single-cell grafting / integrated", ""),
    ]
    for key, label, target in rows:
        print(f"{label:50s} {results[key]:10.2f}  {target}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
