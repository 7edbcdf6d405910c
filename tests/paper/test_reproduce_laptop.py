"""The laptop setting's levers: the layer sweeps left out unless asked for, in the job, the plan
and its estimate; bf16 on CPU detected by its units (its measured choice: test_cpu_precision.py)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest
from typer.testing import CliRunner

from training_fixtures import tiny_home
from weightgraft.cli import _register_all, app
from weightgraft.data.templates import EVAL_TEMPLATES
from weightgraft.paper import reproduce_job
from weightgraft.paper.reproduce_job import ReproduceOptions, finetune_config, plan_job
from weightgraft.paper.reproduce_plan import plan_steps
from weightgraft.paper.reproduce_recipe import SETTINGS, resolve_recipe
from weightgraft.training.builtin import ensure_builtin
from weightgraft.training.precision import CPU_NO_BF16_NOTE, cpu_bf16_units


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    return ensure_builtin("tiny", home=tiny_home(), progress=False, finetunes=False).pretrained


def _options(tmp_path: Path, model="gpt2-xl", **extra) -> ReproduceOptions:
    return ReproduceOptions(model=str(model), out=tmp_path / "job", device="cpu", setting="laptop", **extra)


def test_bf16_units_are_read_off_the_cpus_flags():
    """On Linux x86 the answer is the CPU's own feature flags (torch's checks read the same bits)."""
    cpuinfo = Path("/proc/cpuinfo")
    if platform.machine() not in ("x86_64", "AMD64") or not cpuinfo.is_file():
        pytest.skip("the flags are read from /proc/cpuinfo on Linux x86 only")
    flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    assert cpu_bf16_units() == bool(flags & {"avx512_bf16", "amx_bf16"})


@pytest.mark.parametrize("units", [True, False])
def test_bf16_on_a_cpu_without_units_is_noted_and_auto_stays_fp32(tmp_path, monkeypatch, units):
    """auto stays fp32 where the model is not on disk to time bf16 on (gpt2-xl is not here), with
    or without units; bf16 asked for on a CPU without bf16 units: the plan says it is emulated."""
    monkeypatch.setattr(reproduce_job, "cpu_bf16_units", lambda: units)
    assert finetune_config(plan_job(_options(tmp_path)).recipe).precision == "fp32"
    assert CPU_NO_BF16_NOTE not in plan_job(_options(tmp_path)).notes
    bf16 = _options(tmp_path, precision="bf16")
    assert finetune_config(plan_job(bf16).recipe).precision == "bf16"
    assert (CPU_NO_BF16_NOTE in plan_job(bf16).notes) is not units
    aggressive = ReproduceOptions(model="gpt2-xl", out=tmp_path / "a", device="cuda")
    assert resolve_recipe(aggressive, SETTINGS["aggressive"]).precision == "fp16"  # the paper's, on a GPU


def test_layer_sweeps_are_off_in_laptop_unless_asked(tmp_path):
    main = plan_job(_options(tmp_path)).runs["FMRA"].presets
    assert "layer_sweeps" not in main and "position_grafting" in main and "known_facts" in main
    job = plan_job(_options(tmp_path))
    assert any("--layer-sweeps adds them" in note for note in job.notes)
    assert "layer_sweeps" in plan_job(_options(tmp_path, layer_sweeps=True)).runs["FMRA"].presets
    aggressive = ReproduceOptions(model="gpt2-xl", out=tmp_path / "a", device="cpu")
    assert "layer_sweeps" in plan_job(aggressive).runs["FMRA"].presets
    off = ReproduceOptions(model="gpt2-xl", out=tmp_path / "a", device="cpu", layer_sweeps=False)
    assert "layer_sweeps" not in plan_job(off).runs["FMRA"].presets


def test_the_plan_counts_the_sweeps_rows_only_when_they_run(tmp_path, tiny_model, monkeypatch):
    """The plan (measured on the tiny model) of the laptop setting: the main run's rows without
    the sweeps, and with them the same rows plus the sweeps' conditions x examples, and more time.
    Both plans read one measurement: two would differ by the machine's noise (on a loaded machine
    the plan without the sweeps once came out slower)."""
    from weightgraft.paper import reproduce_plan

    measure, once = reproduce_plan._measured, []

    def measured_once(*args):
        if not once:
            once.append(measure(*args))
        return once[0]

    monkeypatch.setattr(reproduce_plan, "_measured", measured_once)
    steps = {}
    for sweeps in (False, True):
        planned, _ = plan_steps(plan_job(_options(tmp_path, tiny_model, facts=6, layer_sweeps=sweeps)))
        steps[sweeps] = next(s for s in planned if s.name == "run:FMRA")
    assert "layer_sweeps" not in steps[False].what
    conditions, examples = (int(x) for x in steps[True].what.split("layer_sweeps ")[1].split(" ")[0].split("x"))
    assert conditions > 5 and examples == 6 * len(EVAL_TEMPLATES) * 2  # facts x every sentence x 2
    assert steps[True].steps == steps[False].steps + conditions * examples
    assert steps[True].seconds > steps[False].seconds
    _register_all()
    out = tmp_path / "j"
    args = ["reproduce", "--model", str(tiny_model), "--out", str(out), "--device", "cpu", "--setting", "laptop"]
    # the kernel pinned: auto times it on the tiny model, near its 1.05x bar, and names eager in the plan line
    result = CliRunner().invoke(app, [*args, "--attention", "sdpa", "--facts", "6", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "optimizer step (fp32)" in result.output and "--layer-sweeps adds them" in result.output
