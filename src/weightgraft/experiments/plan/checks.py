"""The checks `build.build_plan` makes before any weights load, in one line each.

Model folders, their configs (read with AutoConfig, no weights) and what they say of a model
(`planned_model`), whether recipient and donors fit together, the device, the datasets and their
templates. Each failure is a UserError naming the config field and the fix. (Whether every layer
a condition names fits the recipient is checked where the conditions are resolved:
`build.conditions_on_model`.)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path

import torch
from pydantic import ValidationError
from transformers import AutoConfig, AutoModelForCausalLM

from weightgraft.adapters import adapter_for
from weightgraft.adapters.base import chain_of, module_path
from weightgraft.data.io import load_eval_prompts
from weightgraft.engine.compat import config_differences
from weightgraft.engine.units import UnitError, unit_specs
from weightgraft.errors import UserError
from weightgraft.experiments.conditions import Condition, ConditionSpec
from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.models import check_model_files
from weightgraft.experiments.plan.selection import select_examples, ties_embeddings
from weightgraft.experiments.plan.types import PlannedModel
from weightgraft.model_identity import refuse_same_model
from weightgraft.remote_code import refuse_remote_code
from weightgraft.runtime import check_device

# Config fields that set parameter shapes: models that differ here can never be grafted (the
# engine compares the rest, such as head counts or RoPE settings, once the models are loaded).
SHAPE_FIELDS = ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")


def used_models(config: RunConfig) -> dict[str, set[tuple[str, str]]]:
    """Model keys the run loads, and the (recipient, donor) pairs it grafts between."""
    pairs = set()
    for exp in config.expanded():
        pairs.add((exp.recipient, exp.donor))
        for item in exp.conditions:
            if isinstance(item, ConditionSpec):
                recipient = item.recipient or exp.recipient
                for donor in {item.donor or exp.donor, *(g.donor for g in item.grafts if g.donor)}:
                    pairs.add((recipient, donor))
    keys = {k for pair in pairs for k in pair}
    return {"keys": keys, "pairs": pairs}


def check_distinct_models(config: RunConfig, conditions: Mapping[str, list[Condition]]) -> None:
    """No condition grafts a donor that is its recipient under another key (one folder, a link
    to it, or a copy of its files): such a run would end in a verdict on no finetune at all.
    Keys named twice but never grafted one into the other (a preset's spare role) are fine;
    one key as both roles is the config's own choice and is left alone."""
    pairs: dict[tuple[str, str], str] = {}
    for exp in config.expanded():
        for cond in conditions.get(exp.name, []):
            for donor in {g.donor for g in cond.grafts if g.donor != cond.recipient}:
                pairs.setdefault((cond.recipient, donor), f"experiment {exp.name!r}, condition {cond.name!r}: ")
    for spec in config.localizations():
        if spec.recipient != spec.donor:
            pairs.setdefault((spec.recipient, spec.donor), f"localize experiment {spec.name!r}: ")
    for (recipient, donor), where in pairs.items():
        fields = (f"models.{recipient}", f"models.{donor}")
        refuse_same_model(config.models[recipient], config.models[donor], fields, "graft", where)


def require_device_here(device: str) -> None:
    """A UserError (E-preload-12) unless this machine has `device` (`runtime.check_device`)."""
    try:
        check_device(device, here=True)
    except ValueError as err:
        raise UserError(str(err)) from None


def model_configs(config: RunConfig, keys: set[str]) -> dict[str, object]:
    """Each model's config (config.json only; a hub id not cached has its config.json fetched,
    never its weights), once its architecture is known to have an adapter."""
    out = {}
    for key in sorted(keys):
        field = f"models.{key}"
        folder = check_model_files(config.models[key], field)
        if folder is not None:
            refuse_remote_code(
                folder, config.trust_remote_code, field, "set `trust_remote_code: true` in the run config"
            )
        try:
            loaded = AutoConfig.from_pretrained(
                folder or config.models[key], trust_remote_code=config.trust_remote_code
            )
        except (OSError, ValueError) as err:
            if folder is None:
                raise UserError(
                    f"{field}: cannot load model {config.models[key]!r} ({str(err).splitlines()[0]}); give a "
                    "local folder saved with save_pretrained (safetensors), or a hub id in the local "
                    "Hugging Face cache"
                ) from err
            raise UserError(
                f"{field}: {folder / 'config.json'} cannot be read "
                f"({str(err).splitlines()[0]}); save the model again with "
                "save_pretrained"
            ) from err
        try:
            adapter_for(loaded)
        except ValueError as err:
            raise UserError(f"{field}: {str(err).splitlines()[0]}") from err
        out[key] = loaded
    return out


def planned_model(key: str, path: str, model_config, sha256: str, trust_remote_code: bool = False) -> PlannedModel:
    """What the plan needs of a model, from its config: depth, vocabulary, components, and
    whether it ties its unembedding to its embedding (the model built on the meta device, so
    that the architecture's own tying rule answers, without weights)."""
    text = model_config.get_text_config()
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(model_config, trust_remote_code=trust_remote_code)
    units, matrices = unit_facts(model_config, skeleton)
    return PlannedModel(
        key=key,
        path=path,
        sha256=sha256,
        num_layers=text.num_hidden_layers,
        vocab_size=text.vocab_size,
        components=tuple(adapter_for(model_config).components),
        tied=ties_embeddings(skeleton),
        model_type=text.model_type,
        units=units,
        matrices=matrices,
    )


def unit_facts(model_config, skeleton) -> tuple[dict, dict]:
    """From a model built on the meta device: its heads and neurons per component, as the engine
    divides them (`engine.units.unit_specs`; none where the config has no head count), and each
    component's smallest weight matrix (rows, cols), the bound on a shaped graft's rank."""
    adapter = adapter_for(model_config)
    splits = {path: rule(model_config) for path, rule in adapter.splits.items()}
    try:
        units = {c: [s.kind, s.side, s.count, s.width] for c, s in unit_specs(adapter, skeleton, splits).items()}
    except UnitError:
        units = {}
    layer = adapter.decoder_layers(skeleton)[0]
    matrices = {}
    for comp in adapter.components:
        entry = adapter.per_layer.get(comp)
        if entry is None:
            modules = [skeleton.get_submodule(path) for path in chain_of(adapter.model_level[comp])]
        else:  # a chain: the smallest matrix of any of its modules
            modules = [layer.get_submodule(module_path(ref)) for ref in chain_of(entry)]
        shapes = [list(p.shape) for module in modules for p in module.parameters() if p.dim() == 2]
        if shapes:
            matrices[comp] = min(shapes, key=min)
    return units, matrices


def check_pairs(pairs: set[tuple[str, str]], configs: dict[str, object], allowed: Collection[str] = ()) -> None:
    """Recipient and donor configs agree in every shape, and in every field that changes the
    computation (the engine's own comparison, made here before any weights load)."""
    for recipient, donor in sorted(pairs):
        if recipient == donor or recipient not in configs or donor not in configs:
            continue
        diffs = [
            f"{name} {getattr(configs[recipient], name, None)} vs {getattr(configs[donor], name, None)}"
            for name in SHAPE_FIELDS
            if getattr(configs[recipient], name, None) != getattr(configs[donor], name, None)
        ]
        if diffs:
            raise UserError(
                f"models.{recipient} and models.{donor} cannot be grafted: their "
                f"configs differ in {', '.join(diffs)}; graft between a model and "
                "its own finetunes (same architecture and size)"
            )
        differences = {
            name: values
            for name, values in config_differences(configs[recipient], configs[donor]).items()
            if not ({name, name.split(".")[0], name.split(".")[-1]} & set(allowed))
        }
        if differences:
            listed = "; ".join(f"{f}: recipient {r!r}, donor {d!r}" for f, (r, d) in differences.items())
            raise UserError(
                f"models.{recipient} and models.{donor} cannot be grafted: recipient and donor {donor!r} have "
                f"configs that differ in fields that change the computation: {listed}; graft between "
                "finetunes of one model (or list the fields under `allow_config_differences` if you mean it)"
            )


def check_datasets(config: RunConfig) -> None:
    """Each dataset the run uses exists and has the templates its experiments ask for."""
    prompts = {}
    for exp in config.expanded():
        key = exp.dataset
        field = f"datasets.{key}"
        if key not in prompts:
            folder = Path(config.datasets[key])
            if not folder.is_dir():
                raise UserError(
                    f"{field}: dataset folder {folder} does not exist; build one "
                    "with `weightgraft data --out DIR` or fix the path"
                )
            if not (folder / "eval.jsonl").is_file():
                raise UserError(
                    f"{field}: {folder} has no eval.jsonl, so it is not a dataset "
                    "folder; give a folder written by `weightgraft data`"
                )
            try:
                prompts[key] = load_eval_prompts(folder)
            except ValidationError as err:
                first = err.errors()[0]
                raise UserError(
                    f"{field}: {folder / 'eval.jsonl'}: a record is invalid "
                    f"({'.'.join(map(str, first['loc']))}: {first['msg']}); "
                    "rebuild the dataset with `weightgraft data`"
                ) from err
            except (ValueError, UnicodeDecodeError) as err:
                raise UserError(f"{field}: {err}; rebuild the dataset with `weightgraft data`") from err
        try:
            select_examples(
                prompts[key], exp.templates, exp.max_examples, config.seed, f"experiment {exp.name!r}", exp.directions
            )
        except ValueError as err:
            raise UserError(f"{err}; fix `templates` of experiment {exp.name!r} (or the dataset {field})") from err
