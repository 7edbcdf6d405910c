"""Donors at real scale: peak memory and time of a grafted pass with a full, a lazy and a LoRA donor.

The model has Llama-3.2-1B's shape (built from its config with random weights: no download),
saved once as safetensors to a temporary folder, with a second random model as the donor
checkpoint and a random LoRA adapter (r=16 on q, k, v, o, gate, up, down). CPU, fp32. Each
measurement runs in a fresh process, which loads the recipient with from_pretrained and then:

(a) holds a full donor in memory (rebuilt from the same seed as the saved donor, as a GPU load
    or any converting load holds it): peak memory ~ 2.0 x the recipient's weights. For scale,
    `full_mmap` loads the donor with from_pretrained as is: on CPU, transformers maps fp32
    safetensors lazily, so only the pages that the graft touches become resident;
(b) passes the donor folder (a lazy donor) and grafts O+FFN of the last quarter of the layers at
    the last token: peak <= 1.0 + the grafted tensors' share of the weights + 0.05;
(c) passes the adapter folder (a LoRA donor), same graft: peak <= 1.05;
(d) the grafted pass's time with (b) and with (c) against (a): <= 1.1 each. Timed in one more
    process that holds all three donors and runs them in turn, round after round (fastest of
    TIME_ROUNDS each), so that load from other processes slows all three alike.

Peak memory is the process's peak resident set (VmHWM) minus its resident set after the imports,
divided by the recipient's weight bytes. Needs ~10 GB of memory for (a) and ~11 GB of disk;
`--quick` runs a model of a tenth the size.

Usage: python benchmarks/bench_scale.py [--quick] [--keep DIR] [--out benchmarks/results/scale.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH, SEQ, REPS, TIME_ROUNDS = 4, 16, 2, 5
MODES = ("full", "full_mmap", "lazy", "lora")
GRAFT = dict(positions="last", layers="last_quarter", components=["o", "mlp"])
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def llama_1b_config(quick: bool):
    """Llama-3.2-1B's configuration (from its published config.json); --quick shrinks it."""
    from transformers import LlamaConfig

    sizes = dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        vocab_size=128256,
    )
    if quick:
        sizes = dict(
            hidden_size=1024,
            intermediate_size=4096,
            num_hidden_layers=8,
            num_attention_heads=16,
            num_key_value_heads=4,
            head_dim=64,
            vocab_size=32000,
        )
    return LlamaConfig(
        **sizes,
        max_position_embeddings=131072,
        rms_norm_eps=1e-5,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 32.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        tie_word_embeddings=True,
        bos_token_id=None if quick else 128000,
        eos_token_id=None if quick else 128001,
    )


def prepare(folder: Path, quick: bool) -> None:
    """Write recipient/, donor/ (random weights) and lora/ (a random r=16 adapter) into `folder`."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    config = llama_1b_config(quick)
    for name, seed in (("recipient", 0), ("donor", 1)):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).eval()
        model.save_pretrained(folder / name, safe_serialization=True)
        if name == "recipient":
            lora = LoraConfig(r=16, lora_alpha=32, target_modules=LORA_TARGETS, init_lora_weights=False)
            get_peft_model(model, lora).save_pretrained(folder / "lora")
        del model


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(mode: str, folder: Path, quick: bool) -> None:
    """One measurement in this fresh process; prints a JSON line."""
    import accelerate  # noqa: F401  (every library a mode uses is imported before the baseline)
    import peft  # noqa: F401
    import torch
    import transformers.models.llama.modeling_llama  # noqa: F401
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    from weightgraft import Graft, Grafter
    from weightgraft.donors.checkpoint import SafetensorsCheckpoint

    baseline = rss_kib("VmRSS")
    recipient = AutoModelForCausalLM.from_pretrained(folder / "recipient", dtype=torch.float32).eval()
    weights = sum(p.numel() * p.element_size() for p in recipient.parameters())
    if mode == "full":  # the donor in memory, as a GPU load (or any load that converts) holds it
        torch.manual_seed(1)
        donor = LlamaForCausalLM(llama_1b_config(quick)).eval()
        probe = "model.layers.0.self_attn.k_proj.weight"
        saved = SafetensorsCheckpoint(folder / "donor").read({probe: (torch.device("cpu"), torch.float32)})[probe]
        assert torch.equal(saved, donor.get_parameter(probe)), "the rebuilt donor must equal the saved one"
    elif mode == "full_mmap":  # from_pretrained as is: on CPU, transformers maps fp32 safetensors lazily
        donor = AutoModelForCausalLM.from_pretrained(folder / "donor", dtype=torch.float32).eval()
    else:
        donor = str(folder / ("donor" if mode == "lazy" else "lora"))
    grafter = Grafter(recipient, donor)
    graft = Graft(**GRAFT)
    ids = torch.randint(1000, 30000, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    grafter.last_logits(ids, grafts=graft)  # warm-up; a lazy donor reads its tensors here
    times = []
    for _ in range(REPS):
        start = time.perf_counter()
        grafter.last_logits(ids, grafts=graft)
        times.append(time.perf_counter() - start)
    grafted = {name for name, _ in recipient.named_parameters() if _is_grafted(name, recipient.config)}
    grafted_bytes = sum(p.numel() * p.element_size() for n, p in recipient.named_parameters() if n in grafted)
    print(
        json.dumps(
            {
                "mode": mode,
                "peak_over_weights": (rss_kib("VmHWM") - baseline) * 1024 / weights,
                "grafted_share": grafted_bytes / weights,
                "pass_seconds": min(times),
                "pass_seconds_all": times,
                "weights_gib": weights / 2**30,
                "baseline_mib": baseline / 1024,
                "threads": torch.get_num_threads(),
            }
        )
    )


def time_child(folder: Path) -> None:
    """The grafted pass with each donor, interleaved round by round in one process, so that a
    busy machine slows all three alike; prints a JSON line of the fastest time per donor."""
    import torch
    from transformers import AutoModelForCausalLM

    from weightgraft import Graft, Grafter

    recipient = AutoModelForCausalLM.from_pretrained(folder / "recipient", dtype=torch.float32).eval()
    grafters = {
        "full": Grafter(recipient, AutoModelForCausalLM.from_pretrained(folder / "donor", dtype=torch.float32).eval()),
        "lazy": Grafter(recipient, str(folder / "donor")),
        "lora": Grafter(recipient, str(folder / "lora")),
    }
    graft = Graft(**GRAFT)
    ids = torch.randint(1000, 30000, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[float]] = {name: [] for name in grafters}
    for round in range(TIME_ROUNDS + 1):
        for name, grafter in grafters.items():
            start = time.perf_counter()
            grafter.last_logits(ids, grafts=graft)
            if round:  # round 0 warms up (and loads the lazy donor's tensors)
                times[name].append(time.perf_counter() - start)
    print(
        json.dumps({"fastest": {n: min(t) for n, t in times.items()}, "all": times, "threads": torch.get_num_threads()})
    )


def _is_grafted(name: str, config) -> bool:
    """O and the MLP of the last quarter of the layers (the graft measured)."""
    layers = config.num_hidden_layers
    parts = name.split(".")
    if len(parts) < 4 or parts[1] != "layers":
        return False
    return int(parts[2]) >= 3 * layers // 4 and (parts[3] == "mlp" or parts[4] == "o_proj")


def run_child(mode: str, folder: Path, quick: bool) -> dict:
    cmd = [sys.executable, __file__, "--child", mode, "--folder", str(folder)] + (["--quick"] if quick else [])
    # Large allocations straight from mmap, so that freed memory leaves the resident set.
    env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a small model: a smoke run in seconds")
    parser.add_argument("--keep", type=Path, help="keep (or reuse) the saved models in this folder")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale.json")
    parser.add_argument("--child", choices=MODES + ("time",), help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "time":
        time_child(args.folder)
        return
    if args.child:
        child(args.child, args.folder, args.quick)
        return

    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        folder = args.keep or Path(tmp)
        if not (folder / "lora" / "adapter_config.json").is_file():
            print(f"saving random models to {folder} ...", flush=True)
            subprocess.run(
                [sys.executable, __file__, "--prepare-into", str(folder)] + (["--quick"] if args.quick else []),
                check=True,
            )
        rows = {}
        for mode in MODES:
            print(f"measuring the {mode} donor in a fresh process ...", flush=True)
            rows[mode] = run_child(mode, folder, args.quick)
        print("timing the three donors, interleaved, in one process ...", flush=True)
        timing = run_child("time", folder, args.quick)
    share = rows["lazy"]["grafted_share"]
    results = {
        "a_full_peak_over_weights": rows["full"]["peak_over_weights"],
        "a_full_mmap_peak_over_weights": rows["full_mmap"]["peak_over_weights"],
        "b_lazy_peak_over_weights": rows["lazy"]["peak_over_weights"],
        "b_bound": 1.0 + share + 0.05,
        "grafted_share": share,
        "c_lora_peak_over_weights": rows["lora"]["peak_over_weights"],
        "d_lazy_time_over_full": timing["fastest"]["lazy"] / timing["fastest"]["full"],
        "d_lora_time_over_full": timing["fastest"]["lora"] / timing["fastest"]["full"],
    }
    targets = {
        "a_full_peak_over_weights": "~ 2.0",
        "a_full_mmap_peak_over_weights": "(for scale: from_pretrained's lazy map on CPU)",
        "b_lazy_peak_over_weights": f"<= {results['b_bound']:.3f}",
        "c_lora_peak_over_weights": "<= 1.05",
        "d_lazy_time_over_full": "<= 1.1",
        "d_lora_time_over_full": "<= 1.1",
    }
    print(
        f"\nLlama-3.2-1B shape{' (quick: shrunk)' if args.quick else ''}, CPU fp32, batch {BATCH} x {SEQ}, "
        f"graft {GRAFT}"
    )
    for key, target in targets.items():
        print(f"{key:30s} {results[key]:8.3f}  target {target}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "quick": args.quick,
                "batch": BATCH,
                "seq": SEQ,
                "graft": GRAFT,
                "results": results,
                "runs": rows,
                "timing": timing,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--prepare-into":
        prepare(Path(sys.argv[2]), "--quick" in sys.argv)
    else:
        main()
