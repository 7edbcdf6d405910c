"""`localize` as an experiment of a run config, and its section of the run's report.

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
the same settings and models is reused.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class LocalizeSpec(BaseModel):
    """A minimal graft search over one dataset's evaluation prompts."""

    model_config = ConfigDict(extra="forbid")

    localize: str
    dataset: str
    recipient: str = "pre"
    donor: str = "sft"
    method: Literal["gradient", "integrated"] = "gradient"
    steps: int = Field(default=16, ge=1)
    target: float = Field(default=0.9, gt=0, le=1)
    stop_on: list[Literal["top5", "prob"]] = Field(default=["top5", "prob"], min_length=1)
    max_examples: int | None = Field(default=None, ge=1)
    check_cells: int = Field(default=0, ge=0)
    batch_size: int = Field(default=16, ge=1)

    @field_validator("localize")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
            raise ValueError(f"localize experiment name {value!r} must use letters, digits, '_', '-', '.'")
        return value

    @property
    def name(self) -> str:
        return self.localize


def run_localize(config, spec: LocalizeSpec, out: str | Path, progress: bool = True) -> Path:
    """Run one localize experiment of `config` into OUT/localize/NAME (reused when done)."""
    from weightgraft.attribution.localize import encode_examples, localize
    from weightgraft.data.io import load_eval_prompts
    from weightgraft.engine import Grafter
    from weightgraft.experiments.models import fingerprint_model, load_model, load_tokenizer
    from weightgraft.experiments.plan import select_examples

    folder = Path(out) / "localize" / spec.name
    stamp = {
        "spec": spec.model_dump(),
        "seed": config.seed,
        "dtype": config.dtype,
        "models": {k: fingerprint_model(config.models[k]) for k in (spec.recipient, spec.donor)},
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
        load_eval_prompts(config.datasets[spec.dataset]),
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


def localize_section(out: str | Path) -> list[str]:
    """Markdown for every finished localize experiment of a run folder (none: no lines)."""
    lines: list[str] = []
    for summary_path in sorted(Path(out).glob("localize/*/localize.json")):
        s = json.loads(summary_path.read_text())
        name, rel = summary_path.parent.name, f"localize/{summary_path.parent.name}"
        base, counts = s["baselines"], s["counts"]
        lines += [
            f"## Minimal graft: {name}",
            "",
            f"{s['examples']} prompts; groups (role x layer x component) ranked by {s['method']} "
            f"attribution, grafted top-1, top-2, ... exactly until the set recovers "
            f"{s['target_recovery']:.0%} of SFT's gain over PRE on {' and '.join(s.get('stop_on', ['top5', 'prob']))}.",
            "",
        ]
        felt = base["FE+LT"]
        if s["reached"]:
            chosen = ", ".join(
                f"{c['role']}/{'model' if c['layer'] is None else 'L' + str(c['layer'])}/{c['component']}"
                for c in s["chosen"]
            )
            rec, rand = s["recovery"], s["random_recovery_same_size"]
            lines += [
                "| set | groups | cells per prompt | recovery top-5 | recovery prob |",
                "| --- | --- | --- | --- | --- |",
                f"| minimal (attribution order) | {counts['chosen_groups']} | {counts['chosen_cells_per_prompt']:.1f} "
                f"| {_with_interval(rec['top5'], s, 'chosen', 'top5')} | {_with_interval(rec['prob'], s, 'chosen', 'prob')} |",
                f"| random order, same size | {counts['chosen_groups']} | | {_with_interval(rand['top5'], s, 'random', 'top5')} "
                f"| {_with_interval(rand['prob'], s, 'random', 'prob')} |",
                f"| FE+LT, every layer and component | {counts['fe_lt_groups']} | {counts['fe_lt_cells_per_prompt']:.1f} "
                f"| {_with_interval(felt['recovery_top5'], s, 'FE+LT', 'top5')} "
                f"| {_with_interval(felt['recovery_prob'], s, 'FE+LT', 'prob')} |",
                "",
                f"The minimal set: {chosen}.",
                "",
            ]
        else:
            lines += [
                f"No top-k set reached the target. FE+LT recovers {felt['recovery_top5']:.0%} (top-5), "
                f"{felt['recovery_prob']:.0%} (prob).",
                "",
            ]
        agreement = s.get("agreement") or {}
        if agreement:
            lines += [
                f"On {agreement['examples']} prompts, {agreement['cells']} FE and LT cells grafted one at a "
                f"time: Spearman with the exact effect {agreement.get('spearman_gradient', float('nan')):.2f} "
                f"(gradient), {agreement.get('spearman_integrated', float('nan')):.2f} (integrated).",
                "",
            ]
        lines += [
            f"![recovery]({rel}/recovery.png)",
            "",
            f"![heatmaps]({rel}/heatmaps.png)",
            "",
            f"![positions]({rel}/positions.png)",
            "",
            f"Tokens coloured by what their grafts carry: [{rel}/tokens.html]({rel}/tokens.html).",
            "",
            *[f"_{note}_" for note in s.get("notes", [])],
            "",
        ]
    return lines


def _with_interval(value: float, summary: dict, name: str, metric: str) -> str:
    interval = (summary.get("intervals") or {}).get(name, {}).get(metric)
    if interval and interval.get("defined"):
        return f"{value:.0%} [{interval['low']:.0%}, {interval['high']:.0%}]"
    return f"{value:.0%}"
