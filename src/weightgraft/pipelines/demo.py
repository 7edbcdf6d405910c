"""`weightgraft demo`: the paper's analyses on the built-in models, with a plain verdict.

The built-in data and models come from `weightgraft.training.builtin.ensure_builtin` (built on
first use, cached after). Any of the models can be replaced by a hub id or a local path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from weightgraft.experiments.config import RunConfig, parse_config
from weightgraft.experiments.presets import ALL_PRESETS
from weightgraft.pipelines.run import run_all
from weightgraft.reporting.verdict import Check

# Prompts scored per experiment: enough for intervals of a few points, few enough that every
# preset stays well under a minute on two CPU cores. `None` scores every evaluation prompt.
DEMO_EXAMPLES = {"default": 80, "tiny": 24}
# Presets that need a built-in artifact older built-in folders may lack: preset -> (attribute
# of BuiltinArtifacts, model or dataset key).
NEEDS = {"components_reversal": ("b2a_model", "b2a"), "known_facts": ("known_data", "known")}


@dataclass
class DemoResult:
    out: Path
    checks: list[Check]
    build_seconds: float
    run_seconds: float
    notes: list[str] = field(default_factory=list)


def demo_config(artifacts, *, size: str = "default", recipient: str | None = None,
                donor: str | None = None, task_model: str | None = None,
                freetext_model: str | None = None, b2a_model: str | None = None,
                device: str = "cpu", dtype: str = "float32", max_examples: int | None = -1,
                bootstrap: int = 2000) -> tuple[RunConfig, list[str]]:
    """The demo's run config over built-in artifacts (paths), with optional model overrides,
    and notes on presets left out because an artifact is missing."""
    cap = DEMO_EXAMPLES[size] if max_examples == -1 else max_examples
    models = {"pre": recipient or str(artifacts.pretrained),
              "sft": donor or str(artifacts.relation_model),
              "task": task_model or str(artifacts.task_model),
              "freetext": freetext_model or str(artifacts.freetext_model)}
    datasets = {"relation": str(artifacts.relation_data), "freetext": str(artifacts.freetext_data)}
    b2a = b2a_model or getattr(artifacts, "b2a_model", None)
    if b2a:
        models["b2a"] = str(b2a)
    known = getattr(artifacts, "known_data", None)
    if known:
        datasets["known"] = str(known)
    presets, notes = [], []
    for name in ALL_PRESETS:
        need = NEEDS.get(name)
        if need and need[1] not in models and need[1] not in datasets:
            notes.append(f"preset {name} left out: these built-in artifacts have no {need[0]} "
                         f"(rebuild them with this version's `weightgraft demo`"
                         + (", or pass --b2a-model" if need[1] == "b2a" else "") + ")")
            continue
        presets.append(name)
    config = parse_config({
        "name": f"demo-{size}", "seed": 0, "device": device, "dtype": dtype,
        "models": models, "datasets": datasets,
        "experiments": [{"preset": name, "max_examples": cap} for name in presets]
        + ([{"localize": "relation-minimal", "dataset": "relation", "max_examples": cap}] if size == "default" else []),
        "bootstrap": bootstrap,
    })
    return config, notes


def run_demo(out: str | Path = "runs/demo", *, size: str = "default", home: str | None = None,
             progress: bool = True, **options) -> DemoResult:
    """Build or reuse the built-in artifacts, run the presets into `out`, write the report."""
    from weightgraft.training.builtin import ensure_builtin

    if size not in DEMO_EXAMPLES:
        raise ValueError(f"unknown demo size {size!r}; choose one of {sorted(DEMO_EXAMPLES)}")
    start = time.perf_counter()
    artifacts = ensure_builtin(size=size, home=home, progress=progress)
    built = time.perf_counter()
    config, notes = demo_config(artifacts, size=size, **options)
    outcome = run_all(config, out, progress=progress)
    done = time.perf_counter()
    return DemoResult(Path(out), outcome.checks, built - start, done - built, notes)
