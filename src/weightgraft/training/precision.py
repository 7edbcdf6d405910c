"""Whether this CPU has bf16 units, so that bf16 mixed precision (autocast) pays for a finetune.

torch's own answer to "can oneDNN run bf16 here" (`torch.ops.mkldnn._is_mkldnn_bf16_supported`)
is also yes on AVX-512 CPUs that only emulate bf16 (converting to fp32 and back), where autocast
is slower than fp32. So the units are asked for by name: AVX512-BF16 or AMX on x86 (torch.cpu's
capability checks, which read the CPU's feature bits), the bf16 extension on ARM (oneDNN's check,
which on ARM asks for it). Units are not speed: benchmarks/bench_finetune.py measures what they
give: on a 2-core Xeon with AVX512-BF16 (no AMX) bf16 autocast ran a step at 0.6x fp32's speed, on
a 2-core AMD EPYC with it at 1.5x, where its finetunes' validation top-5 stayed within fp32's seed
spread. So `reproduce --precision auto` times a step of the job's model in both before it takes
bf16 (`paper.cpu_precision`); `--precision bf16` asks for it outright.
"""

from __future__ import annotations

import platform

import torch

ARM_MACHINES = ("aarch64", "arm64")


def _check(name: str) -> bool:
    """One of torch.cpu's private capability checks; False where this torch lacks it."""
    check = getattr(torch.cpu, name, None)
    try:
        return bool(check()) if check is not None else False
    except RuntimeError:
        return False


def cpu_bf16_units() -> bool:
    """True where this CPU computes in bf16 natively (AVX512-BF16 or AMX on x86, BF16 on ARM)."""
    if platform.machine().lower() in ARM_MACHINES:
        try:
            return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        except (AttributeError, RuntimeError):
            return False
    return _check("_is_avx512_bf16_supported") or _check("_is_amx_tile_supported")


CPU_NO_BF16_NOTE = (
    "this CPU has no bf16 units (AVX512-BF16, AMX or ARM BF16): --precision bf16 is emulated "
    "there, slower than fp32 (--precision fp32 or auto)"
)
