"""`weightgraft localize`'s work: the models and dataset named (or the built-in ones), one writer
for the output folder, the search (`attribution.experiment.localize_pair`, the same flow as a run
config's `localize` experiments), and its files."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from weightgraft.attribution.experiment import ModelPair, SearchSettings, localize_pair
from weightgraft.attribution.localize import LocalizeResult
from weightgraft.data.io import load_eval_prompts
from weightgraft.errors import UserError
from weightgraft.experiments.vocabulary import ModelRole, builtin_role_models
from weightgraft.folder_ownership import claim_folder, refuse_foreign, release_unused, seal_folder
from weightgraft.locking import folder_lock, lock_file
from weightgraft.model_identity import refuse_same_model
from weightgraft.remote_code import refuse_remote_code
from weightgraft.training.builtin import ensure_builtin


@dataclass
class LocalizeOutcome:
    """What `localize_to_folder` found, the files it wrote (name -> path) and its seconds."""

    result: LocalizeResult
    written: dict[str, Path]
    seconds: float


def builtin_pair(
    recipient: str | None, donor: str | None, data: Path | None, builtin: str | None, home: str | None, progress: bool
) -> tuple[str, str, Path]:
    """The recipient, donor and dataset: those given, the rest from the built-in models (built or
    reused) when `builtin` names a size; UserError naming what is missing otherwise."""
    if builtin is not None:
        art = ensure_builtin(size=builtin, home=home, progress=progress)
        models = builtin_role_models(art)
        recipient = recipient or models[ModelRole.PRE]
        donor = donor or models[ModelRole.SFT]
        data = data or art.relation_data
    given = (("--recipient", recipient), ("--donor", donor), ("--data", data))
    missing = [name for name, value in given if value is None]
    if missing:
        raise UserError(f"missing {', '.join(missing)}: give the models and a dataset folder, or --builtin default")
    return recipient, donor, Path(data)


def localize_to_folder(
    pair: ModelPair, data: Path, split: str, settings: SearchSettings, out: Path, progress: bool = True
) -> LocalizeOutcome:
    """Search the minimal graft of `pair` on the `split` prompts of dataset `data` and write it to
    `out` (localize.json, tables, pictures), holding `out`'s lock meanwhile. Refuses models that
    ship their own code (unless `pair.trust_remote_code`), a donor that is the recipient itself
    and an `out` holding others' files."""
    for flag, model in zip(pair.labels, (pair.recipient, pair.donor)):
        refuse_remote_code(model, pair.trust_remote_code, flag, "pass --trust-remote-code")
    refuse_same_model(pair.recipient, pair.donor, pair.labels, "graft")
    refuse_foreign(out, "localize", ("localize.json",))
    made = not Path(out).exists()
    try:
        with folder_lock(lock_file(out), out):  # one writer per folder
            claim_folder(out, "localize")
            start = time.perf_counter()
            prompts = load_eval_prompts(data, split)
            result = localize_pair(pair, prompts, settings, what=f"--data {data}", progress=progress)
            written = result.save(out)
            seal_folder(out, "localize", [Path(path).name for path in written.values()])
            return LocalizeOutcome(result, written, time.perf_counter() - start)
    finally:
        release_unused(Path(out), made)
