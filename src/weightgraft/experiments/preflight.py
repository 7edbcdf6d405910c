"""Checks a run makes before any weights load: what can fail later should fail now, in one line.

Model folders, their configs (read with AutoConfig, no weights), whether recipient and donors fit
together, every layer a condition names against the recipient's depth, the device, the datasets
and their templates. Each failure is a UserError naming the config field and the fix.
"""

from __future__ import annotations

from collections.abc import Collection

from pydantic import ValidationError

from weightgraft.adapters.base import GROUPS
from weightgraft.errors import UserError
from weightgraft.experiments.components import resolve_for_model
from weightgraft.experiments.conditions import ConditionSpec
from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.models import check_model_files
from weightgraft.remote_code import refuse_remote_code

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


def check_device(device: str) -> None:
    import torch

    kind = torch.device(device)
    if kind.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(
                f"device: {device!r} asks for a GPU, but torch sees no CUDA device "
                "here; use `device: cpu` (or --device cpu)"
            )
        if kind.index is not None and kind.index >= torch.cuda.device_count():
            raise UserError(
                f"device: {device!r}, but there are only {torch.cuda.device_count()} "
                f"CUDA device(s) (cuda:0..cuda:{torch.cuda.device_count() - 1})"
            )
    if kind.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(f"device: {device!r} is not available on this machine; use `device: cpu`")


def model_configs(config: RunConfig, keys: set[str]) -> dict[str, object]:
    """Each local model's text config (config.json only), once its architecture is known to have
    an adapter; hub ids not cached are left out."""
    from transformers import AutoConfig

    from weightgraft.adapters import adapter_for

    out = {}
    for key in sorted(keys):
        field = f"models.{key}"
        folder = check_model_files(config.models[key], field)
        if folder is None:
            continue
        refuse_remote_code(folder, config.trust_remote_code, field, "set `trust_remote_code: true` in the run config")
        try:
            loaded = AutoConfig.from_pretrained(folder, trust_remote_code=config.trust_remote_code)
        except (OSError, ValueError) as err:
            raise UserError(
                f"{field}: {folder / 'config.json'} cannot be read "
                f"({str(err).splitlines()[0]}); save the model again with "
                "save_pretrained"
            ) from err
        try:
            adapter_for(loaded)
        except ValueError as err:
            raise UserError(f"{field}: {str(err).splitlines()[0]}") from err
        out[key] = loaded.get_text_config()
    return out


def check_pairs(pairs: set[tuple[str, str]], configs: dict[str, object], allowed: Collection[str] = ()) -> None:
    """Recipient and donor configs agree in every shape, and in every field that changes the
    computation (the engine's own comparison, made here before any weights load)."""
    from weightgraft.engine.compat import config_differences

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


def check_layers(config: RunConfig, configs: dict[str, object]) -> None:
    """Every layer set of every condition (sweeps expanded) fits the recipient's depth."""
    from weightgraft.experiments.plan import experiment_conditions, layer_indices

    for exp in config.expanded():
        if exp.recipient not in configs:
            continue
        num_layers = configs[exp.recipient].num_hidden_layers
        try:
            conditions = experiment_conditions(exp, num_layers)
        except ValueError as err:
            where = "" if f"experiment {exp.name!r}" in str(err) else f"experiment {exp.name!r}: "
            raise UserError(
                f"{where}{err}; models.{exp.recipient} has {num_layers} layers, so fix the layers in the config"
            ) from err
        components = _components_of(configs[exp.recipient])
        for cond in conditions:
            for graft in cond.grafts:
                if components is not None:
                    names = resolve_for_model(graft.components, list(components))
                    lacking = [n for n in ([names] if isinstance(names, str) else names) if n not in components]
                    lacking = [n for n in lacking if n not in GROUPS]
                    if lacking:
                        raise UserError(
                            f"experiment {exp.name!r}, condition {cond.name!r}: models.{cond.recipient} "
                            f"({configs[exp.recipient].model_type}) has no component(s) {lacking}; it has "
                            f"{list(components)}, so fix the condition's components"
                        )
                try:
                    layer_indices(graft.layers, num_layers)
                except ValueError as err:
                    raise UserError(
                        f"experiment {exp.name!r}, condition {cond.name!r}: layers "
                        f"{graft.layers!r}: {err}; models.{cond.recipient} has {num_layers} "
                        f"layers, so fix `layers` (0..{num_layers - 1}, negatives from the end, "
                        "or a band such as last_half)"
                    ) from err


def _components_of(model_config) -> tuple[str, ...] | None:
    """The canonical components of a model's architecture, from its config (None if unknown)."""
    from weightgraft.adapters import adapter_for

    try:
        return adapter_for(model_config).components
    except ValueError:
        return None


def check_datasets(config: RunConfig) -> None:
    """Each dataset the run uses exists and has the templates its experiments ask for."""
    from pathlib import Path

    from weightgraft.data.io import load_eval_prompts
    from weightgraft.experiments.plan import select_examples

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


def check_before_loading(config: RunConfig) -> None:
    """Everything about a run that can be checked without loading weights."""
    check_device(config.device)
    used = used_models(config)
    configs = model_configs(config, used["keys"])
    check_pairs(used["pairs"], configs, config.allow_config_differences)
    check_layers(config, configs)
    check_datasets(config)
