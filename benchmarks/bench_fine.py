"""Grafts finer than a component, measured in one run and printed as ratios.

(a) a head graft (O heads 3 and 5 at the last token, last quarter of layers) against the
    recipient's plain forward on the same batch;
(b) a rank-8 graft (O+FFN at the last token, last quarter, ShapedDonor(rank=8)) against the
    plain forward, once the decompositions are cached (their one-off cost, the first call, is
    printed apart, also in plain forwards);
(c) a 16-head x 4-layer O sweep at the last token: 64 conditions x the prompts in one call,
    against one call per (head, layer) condition.

Usage: python benchmarks/bench_fine.py [--quick] [--out benchmarks/results/fine.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from weightgraft import Graft, Grafter
from weightgraft.donors import ShapedDonor

ROOT = Path(__file__).resolve().parents[1]
BATCH, SEQ, HEADS = 16, 32, 16
SWEEP_PROMPTS = 4


def make_models(quick: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    layers, hidden = (8, 256) if quick else (16, 768)

    def build(seed: int):
        torch.manual_seed(seed)
        config = LlamaConfig(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=HEADS,
            num_key_value_heads=4,
            intermediate_size=hidden * 8 // 3,
            vocab_size=32000,
            tie_word_embeddings=False,
        )
        return LlamaForCausalLM(config).eval()

    return build(0), build(1)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ratio_to_plain(recipient, grafted_fn, ids, reps: int) -> tuple[float, float, float]:
    """Median of (grafted / plain) over alternated runs, so a slow moment hits both sides."""
    with torch.no_grad():
        plain_fn = lambda: recipient(input_ids=ids).logits  # noqa: E731
        plain_fn(), grafted_fn()  # warm-up
        plains, grafteds = [], []
        for _ in range(reps):
            plains.append(timed(plain_fn))
            grafteds.append(timed(grafted_fn))
    return (
        statistics.median(g / p for g, p in zip(grafteds, plains)),
        statistics.median(plains),
        statistics.median(grafteds),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smaller model: a smoke run")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "fine.json")
    args = parser.parse_args()

    recipient, donor = make_models(args.quick)
    torch.manual_seed(0)
    ids = torch.randint(100, 30000, (BATCH, SEQ))
    out: dict = {"batch": BATCH, "seq": SEQ, "heads": HEADS, "quick": args.quick}

    heads = Grafter(recipient, donor)
    head_graft = Graft("last", "last_quarter", "o", heads=[3, 5])
    out["a_head_over_plain"], out["plain_s"], out["a_head_s"] = ratio_to_plain(
        recipient, lambda: heads.logits(ids, head_graft), ids, args.reps
    )

    shaped = ShapedDonor(donor, rank=8)
    low_rank = Grafter(recipient, shaped)
    rank_graft = Graft("last", "last_quarter", ["o", "mlp"])
    out["b_first_call_s"] = timed(lambda: low_rank.logits(ids, rank_graft))  # decompositions computed, cached
    out["b_rank8_over_plain"], plain, out["b_rank8_s"] = ratio_to_plain(
        recipient, lambda: low_rank.logits(ids, rank_graft), ids, args.reps
    )
    out["b_first_call_over_plain"] = out["b_first_call_s"] / plain

    layers = list(range(heads.num_layers))[-4:]
    conditions = [Graft("last", [layer], "o", heads=[h]) for layer in layers for h in range(HEADS)]
    prompts = ids[:SWEEP_PROMPTS]
    sweep_ids = prompts.repeat_interleave(len(conditions), dim=0)
    sweep_grafts = conditions * SWEEP_PROMPTS
    one_call = lambda: heads.last_logits(sweep_ids, row_grafts=sweep_grafts)  # noqa: E731
    per_head = lambda: [heads.last_logits(prompts, grafts=c) for c in conditions]  # noqa: E731
    one_call()
    pairs = [(timed(one_call), timed(per_head)) for _ in range(max(1, args.reps // 2))]  # alternated
    out["c_one_call_s"] = statistics.median(t for t, _ in pairs)
    out["c_per_head_calls_s"] = statistics.median(a for _, a in pairs)
    out["c_sweep_speedup"] = statistics.median(a / t for t, a in pairs)
    # the two ways give the same logits (rows of one condition, in the same order)
    stacked = torch.stack([heads.last_logits(prompts, grafts=c) for c in conditions[:3]], dim=1)
    swept = one_call().view(SWEEP_PROMPTS, len(conditions), -1)[:, :3]
    out["c_max_abs_diff"] = float((stacked - swept).abs().max())

    params = sum(p.numel() for p in recipient.parameters())
    out["model"] = f"llama-shaped random, {params / 1e6:.0f}M parameters, {heads.num_layers} layers, {HEADS} heads"
    print(
        f"\n{out['model']}; batch {BATCH} x {SEQ} tokens, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    for key, label, target in [
        ("a_head_over_plain", "(a) O heads [3, 5] at LT / plain forward", "<= 1.3"),
        ("b_rank8_over_plain", "(b) rank-8 O+FFN at LT / plain forward", "<= 1.3"),
        ("b_first_call_s", "    (b) first call, decompositions of 16 matrices included (s)", ""),
        ("b_first_call_over_plain", "    (b) the same in plain forwards", ""),
        ("c_sweep_speedup", f"(c) 16 heads x 4 layers O sweep, {SWEEP_PROMPTS} prompts: one call vs per head", ">= 20"),
        ("c_max_abs_diff", "    (c) max |logit difference| of the two ways", ""),
    ]:
        print(f"{label:72s} {out[key]:9.3g}  {target}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
