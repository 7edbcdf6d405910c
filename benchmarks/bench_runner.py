"""The runner's time on the component and layer-sweep presets, prefix sharing on vs off.

Sharing on is the runner as it is: fixed batches (a chunk of conditions x a few examples) whose
rows share what they have in common through the KV cache, aligned on the prompt's last token.
Sharing off runs the same batches with every row computed in full. Both runs are fresh (nothing
to resume), on random-weight Llama models of one shape (no download), CPU fp32. The prompts are a
generated relation set (`weightgraft data --relation 40`: the paper's three sentences, forward,
120 prompts) under a BPE tokenizer trained on it, so prompt lengths are realistic; `--quick` uses
the tests' tiny world (12 prompts) and smaller models. The ratio is measured in one run on this
machine (medians of --repeats runs), beside the rows x tokens each run computed.

Usage: python benchmarks/bench_runner.py [--quick] [--out benchmarks/results/runner.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the oracle and the tiny world
from tiny_world import base_config, build_tokenizer, write_dataset  # noqa: E402 (the tests' tiny world)
from weightgraft.data.io import load_eval_prompts, load_train_texts
from weightgraft.experiments.config import parse_config
from weightgraft.experiments.runner import Runner
from weightgraft.paper.presets import PAPER_PRESETS  # noqa: F401  (registers the presets the configs name)
from weightgraft.training.tokenizer import train_bpe_tokenizer

ROOT = Path(__file__).resolve().parents[1]

PRESETS = ["components_pre", "components_reversal", "layer_sweeps"]
RELATION_FACTS = 40
VOCAB = 4096
MAX_EXAMPLES = 120  # per preset: the paper presets' 40 facts x 3 sentences; layer_sweeps samples as many


def build_world(root: Path, quick: bool) -> tuple[dict[str, str], str]:
    """Models (pre and two other random inits: sft, b2a, saved as Hugging Face folders, with the
    tokenizer) and the dataset folder."""
    if quick:
        tokenizer, dataset = build_tokenizer(), write_dataset(root / "data")
    else:
        command = [sys.executable, "-m", "weightgraft", "data", "--out", str(root / "data")]
        command += ["--relation", str(RELATION_FACTS), "--task", "0"]
        subprocess.run(command, check=True, capture_output=True)
        dataset = str(root / "data" / "relation")
        texts = load_train_texts(Path(dataset)) + [p.text + p.target for p in load_eval_prompts(Path(dataset))]
        tokenizer = train_bpe_tokenizer(texts, VOCAB)
    layers, hidden = (4, 128) if quick else (8, 512)
    config = LlamaConfig(
        vocab_size=max(len(tokenizer), 8192 if quick else VOCAB),
        hidden_size=hidden,
        intermediate_size=hidden * 8 // 3,
        num_hidden_layers=layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=128,
        bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=None,
    )
    paths = {}
    for seed, name in enumerate(["pre", "sft", "b2a"]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
        model.save_pretrained(root / "models" / name)
        tokenizer.save_pretrained(root / "models" / name)
        paths[name] = str(root / "models" / name)
    return paths, dataset


def time_run(config, share: bool, root: Path) -> tuple[float, int]:
    """Seconds of a fresh run, and the rows x tokens that passed through the decoder layers'
    MLPs, summed over layers (the work sharing saves, whatever the machine is doing)."""
    out = Path(tempfile.mkdtemp(dir=root))
    runner = Runner(config, out, progress=False)
    runner.resources.share_prefixes = share
    work = [0]
    for key in config.models:  # loading is not what is compared
        for layer in runner.resources.model(key).model.layers:
            layer.mlp.register_forward_hook(
                lambda m, args, out: work.__setitem__(0, work[0] + args[0].shape[:2].numel())
            )
    start = time.perf_counter()
    runner.run()
    return time.perf_counter() - start, work[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller models, one repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "runner.json")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        models, data = build_world(root, args.quick)
        for preset in PRESETS:
            config = parse_config(base_config(models, data, [{"preset": preset, "max_examples": MAX_EXAMPLES}]))
            times = {share: [] for share in (True, False)}
            work = {}
            time_run(config, True, root)  # warm-up: first-call costs are not what is compared
            for _ in range(repeats):
                for share in (False, True):
                    seconds, work[share] = time_run(config, share, root)
                    times[share].append(seconds)
            on, off = statistics.median(times[True]), statistics.median(times[False])
            rows.append(
                {
                    "preset": preset,
                    "seconds_sharing_on": round(on, 3),
                    "seconds_sharing_off": round(off, 3),
                    "speedup": round(off / on, 2),
                    "row_tokens_sharing_on": work[True],
                    "row_tokens_sharing_off": work[False],
                    "work_ratio": round(work[False] / work[True], 2),
                }
            )
            print(
                f"{preset:22s} sharing off {off:7.2f} s   on {on:7.2f} s   {off / on:5.2f}x   "
                f"(row-tokens {work[False]} / {work[True]} = {work[False] / work[True]:.2f}x)",
                flush=True,
            )
        total_on = sum(r["seconds_sharing_on"] for r in rows)
        total_off = sum(r["seconds_sharing_off"] for r in rows)
        print(f"{'all three':22s} sharing off {total_off:7.2f} s   on {total_on:7.2f} s   {total_off / total_on:5.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"quick": args.quick, "repeats": repeats, "threads": torch.get_num_threads(), "results": rows}, indent=2
        )
    )


if __name__ == "__main__":
    main()
