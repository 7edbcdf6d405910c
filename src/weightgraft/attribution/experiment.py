"""`localize` as an experiment of a run config (its spec, `LocalizeSpec`, is part of the run config).

```yaml
experiments:
  - localize: relation-minimal        # the experiment's name
    dataset: relation
    recipient: pre
    donor: sft
    method: gradient                  # or integrated (steps: 16)
    target: 0.9
    check_cells: 20                   # Spearman against exact single-cell grafts on 20 prompts
```

Results go to RUN/localize/NAME/ (localize.json, parquet tables, pictures); a finished one with
the same settings, models and dataset (every field of every prompt) is reused. The run report's section on them is
`weightgraft.reporting.localize_section`.
"""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path

from weightgraft.experiments.config import LocalizeSpec


def run_localize(config, spec: LocalizeSpec, out: str | Path, progress: bool = True) -> Path:
    """Run one localize experiment of `config` into OUT/localize/NAME (reused when done)."""
    from weightgraft.attribution.localize import encode_examples, localize
    from weightgraft.data.io import load_eval_prompts
    from weightgraft.engine import Grafter
    from weightgraft.experiments.models import fingerprint_model, load_model, load_tokenizer
    from weightgraft.experiments.plan import select_examples

    folder = Path(out) / "localize" / spec.name
    prompts_read = load_eval_prompts(config.datasets[spec.dataset])
    stamp = {
        "spec": spec.model_dump(),
        "seed": config.seed,
        "dtype": config.dtype,
        "device": config.device.split(":")[0],
        "models": {k: fingerprint_model(config.models[k]) for k in (spec.recipient, spec.donor)},
        # every field of every prompt: a changed dataset is searched again
        "dataset": sha256(
            json.dumps([p.model_dump(mode="json") for p in prompts_read], sort_keys=True).encode()
        ).hexdigest(),
    }
    done = folder / "settings.json"
    if done.is_file() and json.loads(done.read_text()) == stamp and (folder / "localize.json").is_file():
        return folder
    remote = config.trust_remote_code
    tokenizer = load_tokenizer(config.models[spec.recipient], remote)
    grafter = Grafter(
        load_model(config.models[spec.recipient], config.device, config.dtype, remote),
        load_model(config.models[spec.donor], config.device, config.dtype, remote),
        allow_config_differences=config.allow_config_differences,
    )
    prompts = select_examples(
        prompts_read,
        None,
        spec.max_examples,
        config.seed,
        f"localize experiment {spec.name!r}",
    )
    examples = encode_examples(tokenizer, prompts)
    result = localize(
        grafter,
        examples,
        method=spec.method,
        steps=spec.steps,
        target=spec.target,
        batch_size=spec.batch_size,
        seed=config.seed,
        progress=progress,
        stop_on=spec.stop_on,
    )
    if spec.check_cells:
        from weightgraft.attribution.agreement import cell_agreement

        result.agreement = cell_agreement(grafter, examples[: spec.check_cells], steps=spec.steps)
    result.save(folder)
    from weightgraft.atomic import write_text_atomic

    write_text_atomic(done, json.dumps(stamp, indent=2) + "\n")
    return folder
