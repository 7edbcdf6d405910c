"""`weightgraft demo`: the paper's analyses on the built-in models, with a plain verdict.

The built-in data and models come from `weightgraft.training.builtin.ensure_builtin` (built on
first use, cached after). Any of the models can be replaced by a hub id or a local path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from transformers import AutoConfig

from weightgraft.experiments.config import RunConfig, parse_config
from weightgraft.experiments.run_folder import RUN_MARKS
from weightgraft.experiments.vocabulary import ModelRole, builtin_role_models
from weightgraft.folder_ownership import refuse_foreign
from weightgraft.paper.organism import with_organism
from weightgraft.paper.presets import PRESET_NAMES
from weightgraft.paper.study import PAPER
from weightgraft.pipelines.run import run_all
from weightgraft.reporting.verdict import Check

# Prompts scored per experiment: enough for intervals of a few points, few enough that every
# preset stays well under a minute on two CPU cores. `None` scores every evaluation prompt.
DEMO_EXAMPLES = {"default": 80, "tiny": 24}
# The minimal-graft search grafts dozens of nested sets exactly: fewer prompts keep the warm demo
# within a minute.
LOCALIZE_EXAMPLES = 16


@dataclass
class DemoResult:
    out: Path
    checks: list[Check]
    build_seconds: float
    run_seconds: float


def demo_config(
    artifacts,
    *,
    size: str = "default",
    recipient: str | None = None,
    donor: str | None = None,
    task_model: str | None = None,
    freetext_model: str | None = None,
    b2a_model: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    max_examples: int | None = -1,
    bootstrap: int = 2000,
    finer: bool = False,
) -> RunConfig:
    """The demo's run config over built-in artifacts (paths), with optional model overrides;
    `finer` adds the presets finer than a component (`paper.finer_presets`), shaped to the
    one-direction model."""
    cap = DEMO_EXAMPLES[size] if max_examples == -1 else max_examples
    given = {
        ModelRole.PRE: recipient,
        ModelRole.SFT: donor,
        ModelRole.TASK: task_model,
        ModelRole.B2A: b2a_model,
        ModelRole.FREETEXT: freetext_model,
    }
    models = {role: given[role] or path for role, path in builtin_role_models(artifacts).items()}
    extra = finer_entries(models[ModelRole.B2A], cap) if finer else []
    return parse_config(
        {
            "name": f"demo-{size}",
            "seed": 0,
            "device": device,
            "dtype": dtype,
            "models": models,
            "datasets": {
                "relation": str(artifacts.relation_data),
                "known": str(artifacts.known_data),
                "freetext": str(artifacts.freetext_data),
            },
            "experiments": [{"preset": name, "max_examples": cap} for name in PRESET_NAMES]
            + extra
            + (
                [{"localize": "relation-minimal", "dataset": "relation", "max_examples": LOCALIZE_EXAMPLES}]
                if size == "default"
                else []
            ),
            "bootstrap": bootstrap,
        }
    )


def finer_entries(b2a_model: str, cap: int | None) -> list[dict]:
    """The finer presets' entries, with the depth, head count and width they enumerate read
    from the one-direction model's config (the plan checks them again against the model)."""
    text = AutoConfig.from_pretrained(b2a_model, trust_remote_code=False).get_text_config()
    return [
        {
            "preset": "finer_heads_o",
            "max_examples": cap,
            "num_layers": text.num_hidden_layers,
            "num_heads": text.num_attention_heads,
        },
        {"preset": "finer_rank", "max_examples": cap, "hidden_size": text.hidden_size},
        {"preset": "finer_dose", "max_examples": cap},
    ]


def run_demo(
    out: str | Path = "runs/demo", *, size: str = "default", home: str | None = None, progress: bool = True, **options
) -> DemoResult:
    """Build or reuse the built-in artifacts, run the presets into `out`, write the report."""
    # here, not at the top: training.builtin brings transformers' Trainer, measured at 2.4 s
    # more for the start of `weightgraft run` (whose command module imports this one) on a
    # loaded 2-core machine
    from weightgraft.training.builtin import ensure_builtin

    if size not in DEMO_EXAMPLES:
        raise ValueError(f"unknown demo size {size!r}; choose one of {sorted(DEMO_EXAMPLES)}")
    refuse_foreign(out, "run", RUN_MARKS)  # before minutes of building
    start = time.perf_counter()
    artifacts = ensure_builtin(size=size, home=home, progress=progress)
    built = time.perf_counter()
    config = demo_config(artifacts, size=size, **options)
    replaced = any(options.get(role) for role in ("recipient", "donor", "task_model", "freetext_model", "b2a_model"))
    # The organism's section describes the default built-in models; not once a model is replaced.
    study = with_organism(PAPER) if size == "default" and not replaced else PAPER
    outcome = run_all(config, out, progress=progress, study=study)
    done = time.perf_counter()
    return DemoResult(Path(out), outcome.checks, built - start, done - built)
