"""Engine benchmarks, measured in one run on this machine and printed as ratios.

(a) a grafted pass (first entity + last token, all layers, all components) against the
    recipient's plain forward on the same batch;
(b) examples x conditions per second against the paper's per-token method (a fresh copy of the
    recipient per token, donor weights copied in, one token against the KV cache);
(c) the same for a sweep of 8 last-token component conditions, which share their prompt prefix
    through the KV cache;
(d) peak memory of a grafted pass against the two models' weights alone (run in a subprocess);
(e) the researcher's views against `logits` on the same rows and grafts: `score` (prompts with
    roles, a 3-token target teacher-forced, scored by the runner's rule) against `logits` of the
    same rows, and `cache` (every activation, or the residual stream only) against `logits`.

Usage: python benchmarks/bench_engine.py [--quick] [--out benchmarks/results/engine.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))  # the oracle and the tiny world
from reference_grafter import GraftSpec, reference_logits  # noqa: E402 (the per-token method)
from weightgraft import Graft, Grafter

ROOT = Path(__file__).resolve().parents[1]

BATCH, SEQ = 16, 32
FIRST_ENTITY = [2, 3]  # a two-token first entity, as in "Q: Keanu Reeves ..."
LT_CONDITIONS = {  # the paper's last-token component conditions, last quarter of layers
    "ATTN+O+FFN": ["q", "k", "v", "o", "mlp"],
    "ATTN+O": ["q", "k", "v", "o"],
    "ATTN+FFN": ["q", "k", "v", "mlp"],
    "O+FFN": ["o", "mlp"],
    "O": ["o"],
    "FFN": ["mlp"],
    "O+UP": ["o", "up"],
    "O+DOWN": ["o", "down"],
}


def make_models(shape: str, quick: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    layers, hidden, heads = (4, 256, 4) if quick else (12, 768, 12)

    def build(seed: int):
        torch.manual_seed(seed)
        if shape == "gpt2":
            config = GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, vocab_size=50257, n_positions=1024)
            return GPT2LMHeadModel(config).eval()
        config = LlamaConfig(
            num_hidden_layers=layers,
            hidden_size=hidden,
            num_attention_heads=heads,
            num_key_value_heads=heads // 3 if heads % 3 == 0 else heads,
            intermediate_size=hidden * 8 // 3,
            vocab_size=32000,
            tie_word_embeddings=False,
        )
        return LlamaForCausalLM(config).eval()

    return build(0), build(1)


def median_time(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def reference_seconds_per_example(recipient, donor, ids: torch.Tensor, specs: list) -> float:
    """The per-token method's time for one example under one condition (averaged)."""
    start = time.perf_counter()
    for row, spec in zip(ids, specs):
        reference_logits(recipient, donor, row, spec)
    return (time.perf_counter() - start) / len(specs)


def bench_model(shape: str, quick: bool, reps: int) -> dict:
    recipient, donor = make_models(shape, quick)
    grafter = Grafter(recipient, donor)
    torch.manual_seed(0)
    ids = torch.randint(100, 30000, (BATCH, SEQ))
    fe_lt = Graft(FIRST_ENTITY + [-1], "all", "all")

    # (a) one grafted pass against the plain forward, same batch, full logits; alternated, so
    # that a slow moment of the machine hits both sides of a ratio.
    ratios, plains, grafteds = [], [], []
    for _ in range(reps):
        with torch.no_grad():
            plains.append(median_time(lambda: recipient(input_ids=ids).logits, 1))
        grafteds.append(median_time(lambda: grafter.logits(ids, grafts=fe_lt), 1))
        ratios.append(grafteds[-1] / plains[-1])
    plain, grafted = statistics.median(plains), statistics.median(grafteds)

    # (b) position conditions, one per row, mixed in one batch of 16 distinct examples.
    complement = [p for p in range(SEQ) if p not in FIRST_ENTITY + [SEQ - 1]]
    conditions = [Graft(FIRST_ENTITY), Graft(-1), Graft(FIRST_ENTITY + [-1]), Graft(complement)]
    row_grafts = [conditions[i % len(conditions)] for i in range(BATCH)]
    mixed = median_time(lambda: grafter.last_logits(ids, row_grafts=row_grafts), reps)
    ours_rate_b = BATCH / mixed
    ref_specs = [GraftSpec(FIRST_ENTITY + [-1]), GraftSpec(complement)]
    ref_seconds = reference_seconds_per_example(recipient, donor, ids[:2], ref_specs)
    ref_rate = 1 / ref_seconds

    # (c) 8 last-token conditions x 16 prompts = 128 rows; the prompt prefix is shared.
    sweep_ids = ids.repeat_interleave(len(LT_CONDITIONS), dim=0)
    sweep_grafts = [Graft("last", "last_quarter", comps) for comps in LT_CONDITIONS.values()] * BATCH
    sweep = median_time(lambda: grafter.last_logits(sweep_ids, row_grafts=sweep_grafts), max(1, reps // 2))
    ours_rate_c = len(sweep_grafts) / sweep
    grafter.share_prefixes = False  # the same sweep with every row run in full
    unshared = median_time(lambda: grafter.last_logits(sweep_ids, row_grafts=sweep_grafts), 1)
    grafter.share_prefixes = True

    params = sum(p.numel() for p in recipient.parameters())
    return {
        "model": f"{shape}-shaped random, {params / 1e6:.0f}M parameters",
        "plain_forward_s": plain,
        "grafted_forward_s": grafted,
        "a_grafted_over_plain": statistics.median(ratios),
        "b_ours_examples_conditions_per_s": ours_rate_b,
        "reference_examples_conditions_per_s": ref_rate,
        "b_speedup_vs_per_token": ours_rate_b / ref_rate,
        "c_ours_examples_conditions_per_s": ours_rate_c,
        "c_speedup_vs_per_token": ours_rate_c / ref_rate,
        "c_prefix_sharing_gain": unshared / sweep,
    }


class _Encoded:
    """What `Prompt.encode` returns, for a prompt of random token ids (no tokenizer here)."""

    def __init__(self, input_ids: list[int], target_ids: list[int]):
        self.input_ids, self.target_ids, self.scored = input_ids, target_ids, 0
        self.scored_id = target_ids[0]
        self.unit = 1  # the scored unit: one token (random ids split no character)


class _RandomPrompt:
    """A prompt with roles over random token ids: the protocol `Grafter.score` reads."""

    def __init__(self, ids: list[int], target: list[int]):
        self.input_ids, self.id, self._target = ids, "random", target
        self.roles = {"first_entity": FIRST_ENTITY, "last_token": [len(ids) - 1]}

    def encode(self, target=None) -> _Encoded:
        return _Encoded(self.input_ids, self._target)

    def decode(self, ids) -> str:
        return " ".join(map(str, ids))


def bench_views(shape: str, quick: bool, reps: int) -> dict:
    """(e): score and cache against logits, same rows and grafts, alternated run by run."""
    recipient, donor = make_models(shape, quick)
    grafter = Grafter(recipient, donor)
    torch.manual_seed(0)
    ids = torch.randint(100, 30000, (BATCH, SEQ + 2))
    prompts = [_RandomPrompt(row[:SEQ].tolist(), row[SEQ - 1 :].tolist()[1:] + [7]) for row in ids]
    fe_lt = Graft("FE+LT", "all", "all")
    rows = torch.stack([torch.tensor(p.input_ids + p.encode().target_ids[:-1]) for p in prompts])
    concrete = [Graft([*FIRST_ENTITY, *range(SEQ - 1, rows.shape[1])], "all", "all")] * BATCH
    plain = ids[:, :SEQ]
    runs = {
        "logits_rows": lambda: grafter.logits(rows, row_grafts=concrete),
        "logits_kept": lambda: grafter.logits(rows, row_grafts=concrete, logits_to_keep=3),
        "score": lambda: grafter.score(prompts, grafts=fe_lt),
        "logits": lambda: grafter.logits(plain, grafts=Graft(FIRST_ENTITY + [-1], "all", "all")),
        "cache_all": lambda: grafter.cache(plain, grafts=Graft(FIRST_ENTITY + [-1], "all", "all")),
        "cache_resid": lambda: grafter.cache(plain, grafts=Graft(FIRST_ENTITY + [-1]), names="blocks.*.resid_post"),
    }
    times = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            times[name].append(median_time(run, 1))
    median = {name: statistics.median(values) for name, values in times.items()}
    return {
        "e_score_over_logits": median["score"] / median["logits_rows"],
        "e_score_over_logits_kept": median["score"] / median["logits_kept"],
        "e_cache_over_logits": median["cache_all"] / median["logits"],
        "e_cache_resid_over_logits": median["cache_resid"] / median["logits"],
    }


def memory_child(shape: str, quick: bool) -> None:
    """Peak resident memory of one grafted pass, relative to the two models' weights."""

    def rss_kib(field: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise RuntimeError(f"{field} not in /proc/self/status")

    baseline = rss_kib("VmRSS")
    recipient, donor = make_models(shape, quick)
    gc.collect()
    weights = sum(p.numel() * p.element_size() for m in (recipient, donor) for p in m.parameters())
    grafter = Grafter(recipient, donor)
    torch.manual_seed(0)
    ids = torch.randint(100, 30000, (BATCH, SEQ))
    fe_lt = Graft(FIRST_ENTITY + [-1], "all", "all")
    loaded = rss_kib("VmRSS")  # weights plus the Python objects and code that came with them
    results = {"library_overhead": (loaded - baseline) * 1024 / weights - 1}
    runs = {
        "plain": lambda: recipient(input_ids=ids).logits,
        "logits": lambda: grafter.logits(ids, grafts=fe_lt),
        "last_logits": lambda: grafter.last_logits(ids, grafts=fe_lt),
    }
    for name, run in runs.items():
        gc.collect()
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak (VmHWM) to the current RSS
        with torch.no_grad():
            run()
        # What the pass needs on top of the loaded models, against the weights alone.
        results[name] = 1 + (rss_kib("VmHWM") - loaded) * 1024 / weights
    print(json.dumps(results))


def bench_memory(shape: str, quick: bool) -> dict:
    cmd = [sys.executable, __file__, "--memory-child", shape] + (["--quick"] if quick else [])
    # Large allocations straight from mmap, so that freed memory leaves the resident set and the
    # peak reflects what was live, not what glibc kept cached from building the models.
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
    return {f"d_peak_over_weights_{k}": v for k, v in json.loads(out).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small models: a smoke run in seconds")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "engine.json")
    parser.add_argument("--memory-child", choices=["gpt2", "llama"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args.quick)
        return

    rows = {}
    for shape in ("gpt2", "llama"):
        print(f"benchmarking {shape}-shaped model ...", flush=True)
        rows[shape] = bench_model(shape, args.quick, args.reps) | bench_memory(shape, args.quick)
        rows[shape] |= bench_views(shape, args.quick, args.reps)

    targets = [
        ("a_grafted_over_plain", "(a) grafted pass / plain forward", "<= 1.3"),
        ("b_speedup_vs_per_token", "(b) examples x conditions/s vs per-token", ">= 40"),
        ("c_speedup_vs_per_token", "(c) 8 LT conditions vs per-token", ">= 100"),
        ("c_prefix_sharing_gain", "    (c) gain from prefix sharing", ""),
        ("d_peak_over_weights_logits", "(d) peak memory / weights, full logits", "<= 1.15"),
        ("d_peak_over_weights_last_logits", "    (d) peak memory / weights, last logits", ""),
        ("d_peak_over_weights_plain", "    (d) same for a plain forward, for scale", ""),
        ("d_peak_over_weights_library_overhead", "    (d) Python objects and code per weight byte", ""),
        ("e_score_over_logits", "(e) score / logits, same rows and grafts", "<= 1.1"),
        ("e_score_over_logits_kept", "    (e) score / logits of the scored columns", ""),
        ("e_cache_over_logits", "(e) cache, every activation / logits", "<= 1.1"),
        ("e_cache_resid_over_logits", "    (e) cache, residual stream only / logits", ""),
    ]
    print(f"\nbatch {BATCH} x {SEQ} tokens, torch {torch.__version__}, {torch.get_num_threads()} threads, CPU")
    print(f"{'measure':46s} {'gpt2':>9s} {'llama':>9s}  target")
    for key, label, target in targets:
        print(f"{label:46s} {rows['gpt2'][key]:9.2f} {rows['llama'][key]:9.2f}  {target}")
    for shape, row in rows.items():
        print(f"{shape}: {row['model']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"batch": BATCH, "seq": SEQ, "quick": args.quick, "results": rows}, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
