"""`localize` on two models and a dataset's prompts: the one flow behind `weightgraft localize`
and a run config's `localize` experiments (`run_localize`; its spec, `LocalizeSpec`, is part of
the run config).

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

Results go to RUN/localize/NAME/ (localize.json, parquet tables, pictures, and provenance.json:
the folder's ledger); a finished one with the same settings, models and dataset (every field of
every prompt) is reused, by the ledger's rule (`weightgraft.ledger`). The run report's section on them is
`weightgraft.reporting.localize_section`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from weightgraft.attribution.agreement import cell_agreement
from weightgraft.attribution.localize import LocalizeResult, localize
from weightgraft.attribution.role_examples import encode_role_examples
from weightgraft.data.encode import check_context
from weightgraft.data.io import load_eval_prompts
from weightgraft.engine.grafter import Grafter
from weightgraft.errors import UserError
from weightgraft.experiments.config import LocalizeSpec
from weightgraft.experiments.models import context_length, fingerprint_model, load_model, load_tokenizer
from weightgraft.experiments.plan.selection import select_examples
from weightgraft.folder_ownership import OWNED_RECORD, remove_entry
from weightgraft.ledger import Built, Ledger
from weightgraft.reporting.localize_results import LOCALIZE_FILE
from weightgraft.runtime import sha256_json


@dataclass(frozen=True)
class ModelPair:
    """The recipient and donor of a search and how to load them.

    recipient, donor: model folders or cached hub ids. device, dtype: as `load_model` takes them.
    trust_remote_code: let folders that ship their own code run it. allow_config_differences:
    config fields the models may differ in although they change the computation (the `Grafter`'s
    option, e.g. `("rope_theta",)`). labels: how errors name the two (`--recipient`, `models.pre`, ...)."""

    recipient: str
    donor: str
    device: str = "cpu"
    dtype: str = "float32"
    trust_remote_code: bool = False
    allow_config_differences: tuple[str, ...] = ()
    labels: tuple[str, str] = ("recipient", "donor")


@dataclass(frozen=True)
class SearchSettings:
    """How `localize` searches (see `weightgraft.attribution.localize.localize`): method and steps
    of attribution, the recovery target on each `stop_on` metric, prompts per pass, the seeded cap
    on prompts, and how many prompts the exact single-cell check (`check_cells`, 0: none) uses."""

    method: str = "gradient"
    steps: int = 16
    target: float = 0.9
    stop_on: Sequence[str] = ("top5", "prob")
    batch_size: int = 16
    max_examples: int | None = None
    check_cells: int = 0
    seed: int = 0
    grain: str = "component"  # or "head", "neuron": search over heads or neurons


def localize_pair(
    pair: ModelPair, prompts: list, settings: SearchSettings, *, what: str, progress: bool = True
) -> LocalizeResult:
    """The minimal graft of `pair.donor` into `pair.recipient` on `prompts` (EvalPrompts; the
    seeded choice of `settings.max_examples` of them): encode, check they fit the recipient's
    context, load both models, search, and (with `check_cells`) compare with exact grafts.
    `what` names the prompts' source in errors. Raises UserError when the models cannot be
    grafted or a prompt does not fit."""
    recipient_label, donor_label = pair.labels
    remote = pair.trust_remote_code
    tokenizer = load_tokenizer(pair.recipient, remote, recipient_label)
    chosen = select_examples(prompts, None, settings.max_examples, settings.seed, what)
    examples = encode_role_examples(tokenizer, chosen)
    check_context({e.id: len(e.input_ids) for e in examples}, context_length(pair.recipient), what)
    models = (
        load_model(pair.recipient, pair.device, pair.dtype, remote, recipient_label),
        load_model(pair.donor, pair.device, pair.dtype, remote, donor_label),
    )
    try:
        grafter = Grafter(*models, allow_config_differences=pair.allow_config_differences)
    except ValueError as err:  # the engine's word on models that do not fit together
        raise UserError(
            f"{recipient_label} and {donor_label} cannot be grafted: {_in_our_words(err, donor_label)}"
        ) from None
    result = localize(
        grafter,
        examples,
        method=settings.method,
        steps=settings.steps,
        target=settings.target,
        batch_size=settings.batch_size,
        seed=settings.seed,
        grain=settings.grain,
        progress=progress,
        stop_on=list(settings.stop_on),
    )
    if settings.check_cells:
        result.agreement = cell_agreement(grafter, examples[: settings.check_cells], steps=settings.steps)
    return result


def _in_our_words(err: ValueError, donor_label: str) -> str:
    """The engine's refusal with the donor called by its label (the engine calls the one donor of
    this Grafter `donor`, which read "donor 'donor'") and its fix said the way a run config and
    the command line say it, not the engine's Python call."""
    text = str(err).replace("donor 'donor'", donor_label)
    return re.sub(
        r"pass Grafter\(\.\.\., allow_config_differences=\((.*?),?\)\)",
        r"allow them: allow_config_differences: [\1] in a run config, --allow-config-difference FIELD to localize",
        text,
    )


# A localize experiment's folder keeps its ledger (one step, the search) beside the results.
LEDGER_FILE = "provenance.json"
SEARCH_STEP = "localize"
# Where a search finished before its folder had a ledger kept its inputs (adopted, then removed).
OLD_STAMP = "settings.json"


def run_localize(config, spec: LocalizeSpec, out: str | Path, progress: bool = True) -> Path:
    """Run one localize experiment of `config` into OUT/localize/NAME: a step of the folder's
    ledger (`weightgraft.ledger`), reused when done with the same inputs, searched again when
    they changed or a result file is gone or damaged."""
    folder = Path(out) / "localize" / spec.name
    prompts_read = load_eval_prompts(config.datasets[spec.dataset])
    inputs = {
        # `grain` only when it is not the default, so that an existing search keeps its inputs
        "spec": spec.model_dump(exclude={"grain"} if spec.grain == "component" else None),
        "seed": config.seed,
        "dtype": config.dtype,
        "device": config.device.split(":")[0],
        "models": {k: fingerprint_model(config.models[k]) for k in (spec.recipient, spec.donor)},
        # every field of every prompt: a changed dataset is searched again
        "dataset": sha256_json([p.model_dump(mode="json") for p in prompts_read]),
    }
    ledger = Ledger(folder / LEDGER_FILE, {"localize": spec.name}, base=folder)
    _adopt_old_stamp(ledger, folder, inputs)

    def search() -> Built:
        _search(config, spec, prompts_read, progress).save(folder)
        return {}, _result_files(folder)

    ledger.run(SEARCH_STEP, inputs, search)
    return folder


def _search(config, spec: LocalizeSpec, prompts_read: list, progress: bool) -> LocalizeResult:
    """The search of `spec` on the prompts, with `config`'s models, device and seed."""
    pair = ModelPair(
        config.models[spec.recipient],
        config.models[spec.donor],
        config.device,
        config.dtype,
        config.trust_remote_code,
        tuple(config.allow_config_differences),
        (f"models.{spec.recipient}", f"models.{spec.donor}"),
    )
    settings = SearchSettings(
        spec.method,
        spec.steps,
        spec.target,
        tuple(spec.stop_on),
        spec.batch_size,
        spec.max_examples,
        spec.check_cells,
        config.seed,
        spec.grain,
    )
    return localize_pair(pair, prompts_read, settings, what=f"localize experiment {spec.name!r}", progress=progress)


def _result_files(folder: Path) -> list[Path]:
    """The files a search wrote in `folder` (its ledger and old stamp are not results)."""
    # nor is the record of weightgraft's files there (`recorded.seal_tree`), rewritten as the run goes
    return sorted(p for p in folder.iterdir() if p.is_file() and p.name not in (LEDGER_FILE, OLD_STAMP, OWNED_RECORD))


def _adopt_old_stamp(ledger: Ledger, folder: Path, inputs: dict) -> None:
    """A search finished before its folder had a ledger (`settings.json` holding the same inputs,
    beside localize.json) is recorded as done, so that it is not searched again."""
    stamp = folder / OLD_STAMP
    if ledger.record_of(SEARCH_STEP) is not None or not (stamp.is_file() and (folder / LOCALIZE_FILE).is_file()):
        return
    if json.loads(stamp.read_text()) == inputs:
        ledger.finish(SEARCH_STEP, inputs, {}, _result_files(folder), None)
    remove_entry(folder, OLD_STAMP)
