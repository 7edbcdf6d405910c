"""Self-replay's decoding, measured in one run and printed as ratios.

The same neutral prompts continued (`paper.replay.replay_texts`, 32 tokens, 3 samples each) with
`PROMPTS_PER_BATCH` prompts decoded together (left-padded, one forward per new token) against one
prompt at a time (its 3 rows a batch, as the step ran before), in two threads and in one. The
texts must be the same whichever way they were decoded (each prompt samples with its own
generator); the ratio is the step's speedup. With --model, a converted model folder or real model
name (default: the built-in default model).

Usage: python benchmarks/bench_replay.py [--model smollm2-135m] [--prompts 32]
"""

from __future__ import annotations

import argparse
import time

import torch

from weightgraft.paper import replay
from weightgraft.paper.neutral_prompts import NEUTRAL_PROMPTS
from weightgraft.training.builtin import ensure_builtin


def _timed(model: str, prompts, per_batch: int, threads: int) -> tuple[float, list[str]]:
    before, batch = torch.get_num_threads(), replay.PROMPTS_PER_BATCH
    torch.set_num_threads(threads)
    replay.PROMPTS_PER_BATCH = per_batch
    try:
        start = time.perf_counter()
        texts = replay.replay_texts(model, prompts, replay.ReplaySpec())
        return time.perf_counter() - start, texts
    finally:
        torch.set_num_threads(before)
        replay.PROMPTS_PER_BATCH = batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="model folder or real model name (default: the built-in default model)")
    parser.add_argument("--prompts", type=int, default=replay.PROMPTS_PER_BATCH)
    args = parser.parse_args()
    model = args.model or str(ensure_builtin("default", progress=False, finetunes=False).pretrained)
    prompts = NEUTRAL_PROMPTS[: args.prompts]
    threads = torch.get_num_threads()
    together, texts = _timed(model, prompts, replay.PROMPTS_PER_BATCH, threads)
    alone, alone_texts = _timed(model, prompts, 1, 1)
    together_one, _ = _timed(model, prompts, replay.PROMPTS_PER_BATCH, 1)
    same = sum(a == b for a, b in zip(texts, alone_texts, strict=True))
    print(f"model {model}: {len(prompts)} prompts, {len(texts)} texts of 32 tokens")
    print(f"one prompt a batch, 1 thread:       {alone:7.1f} s")
    print(
        f"{replay.PROMPTS_PER_BATCH} prompts a batch, 1 thread:        {together_one:7.1f} s  ({alone / together_one:.2f}x)"
    )
    print(
        f"{replay.PROMPTS_PER_BATCH} prompts a batch, {threads} threads:       {together:7.1f} s  ({alone / together:.2f}x)"
    )
    print(f"texts the same either way: {same} of {len(texts)}")


if __name__ == "__main__":
    main()
