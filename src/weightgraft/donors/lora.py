"""A LoRA adapter (PEFT's) as a donor: the recipient plus the adapter's delta, never a merged copy.
In weightgraft's code its name is "lora" (`LoraDonor`): "adapter" names an architecture table
(`weightgraft.adapters`).

A LoRA finetune changes a module's output by `scaling * B(A(x))`. The donor module at a path is
therefore that delta alone, flagged `adds_to_output`: the engine adds it to the recipient
module's own output at the grafted rows, which equals grafting the merged model
(`merge_and_unload()`) up to float rounding, with a few MB of adapter weights instead of a second
model. peft reads the adapter (config, target modules, rank and alpha patterns, rsLoRA scaling);
DoRA and the other PEFT methods are refused by name.

peft is imported inside the functions that use it, not at the top: every run imports this module
(through `donors`), few use a LoRA donor, and peft costs 1.9 s more at the start of `weightgraft
run`, `demo` and `reproduce` (measured on a loaded 2-core machine).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from accelerate import init_empty_weights
from torch import nn

from weightgraft.donors.checkpoint import pickled_files, resolve_folder
from weightgraft.donors.placement import execution_device

PEFT_CONFIG_FILE = "adapter_config.json"
PEFT_WEIGHTS_FILE = "adapter_model.safetensors"
SAVED_PREFIX = "base_model.model."  # how PeftModel.save_pretrained names adapter tensors
# peft also saves the whole base weight of adapted embeddings and lm_heads (save_embedding_layers).
BASE_LAYER_SUFFIX = ".base_layer.weight"
# LoraConfig switches that change more than "B(A(x)) * scaling added to a target module's output".
UNSUPPORTED_SWITCHES = {
    "use_dora": "DoRA (use_dora=True)",
    "modules_to_save": "fully trained modules (modules_to_save)",
    "trainable_token_indices": "trainable tokens (trainable_token_indices)",
    "layer_replication": "layer replication",
    "target_parameters": "LoRA on parameters (target_parameters)",
    "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens)",
}


@dataclass
class LoraFactors:
    """One adapted module: delta = scaling * B(A(x)) (+ B's bias, scaled), times embed_scale for
    scaled embeddings. `embedding` marks token-id inputs (A is then [r, vocab])."""

    A: torch.Tensor
    B: torch.Tensor
    bias: torch.Tensor | None
    scaling: float
    embedding: bool = False
    embed_scale: torch.Tensor | None = None


class LoraDelta(nn.Module):
    """The adapter's change to one module's output; the engine adds it to the recipient's output."""

    adds_to_output = True

    def __init__(self, factors: LoraFactors, device: torch.device):
        super().__init__()
        self.A = factors.A.to(device)
        self.B = factors.B.to(device)
        self.bias = None if factors.bias is None else factors.bias.to(device)
        self.scaling = factors.scaling
        self.embedding = factors.embedding
        self.embed_scale = None if factors.embed_scale is None else factors.embed_scale.to(device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Like peft's own unmerged forward: compute in the adapter's dtype; the engine casts the sum.
        h = F.embedding(x, self.A.T) if self.embedding else F.linear(x.to(self.A.dtype), self.A)
        delta = F.linear(h, self.B, self.bias) * self.scaling
        return delta if self.embed_scale is None else delta * self.embed_scale.to(delta.dtype)


class NoChange(nn.Module):
    """A module the adapter leaves alone: it adds nothing."""

    adds_to_output = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros((), device=x.device)  # broadcasts to any output shape, keeps its dtype


class LoraDonor:
    """The recipient with a PEFT adapter applied: a PeftModel, or a folder or hub id holding
    adapter_config.json and adapter_model.safetensors.

    It is bound to the recipient it was made for. `check_base_model=False` skips the comparison of
    the adapter's recorded base model name with the recipient's (shapes are always checked).
    """

    def __init__(
        self,
        lora: object,
        recipient: nn.Module,
        revision: str | None = None,
        check_base_model: bool = True,
    ):
        from peft import PeftModel

        self.recipient = recipient
        self.config = recipient.config
        _refuse_adapted_recipient(recipient)
        if isinstance(lora, PeftModel):
            self.name = f"PeftModel({type(lora.get_base_model()).__name__})"
            peft_config, self.factors = _factors_from_peft_model(lora, recipient)
        elif isinstance(lora, (str, Path)):
            folder = resolve_folder(lora, revision, kind="adapter")
            self.name = str(folder)
            peft_config, self.factors = _factors_from_folder(folder, recipient)
        else:
            raise TypeError(f"an adapter donor is a peft.PeftModel or an adapter folder, not {type(lora).__name__}")
        if check_base_model:
            _check_base_name(peft_config, recipient, self.name)
        _check_shapes(self.factors, recipient, self.name)
        self.peft_config = peft_config
        self._modules: dict[str, nn.Module] = {}

    def __repr__(self) -> str:
        return f"LoraDonor({self.name!r}, {len(self.factors)} adapted modules)"

    # --- DonorSource ------------------------------------------------------------------------------
    def parameter_shapes(self) -> dict[str, torch.Size]:
        """The recipient's own: the donor is the recipient plus deltas."""
        return {name: p.shape for name, p in self.recipient.named_parameters()}

    def check_against(self, recipient: nn.Module) -> None:
        if recipient is not self.recipient:
            raise ValueError("this adapter donor was made for another recipient model; make one for this recipient")

    def module(self, path: str) -> nn.Module:
        if path not in self._modules:
            factors = self.factors.get(path)
            if factors is None:
                self._modules[path] = NoChange()
            else:
                self._modules[path] = LoraDelta(factors, execution_device(self.recipient, path))
        return self._modules[path]

    @contextmanager
    def running(self) -> Iterator[None]:
        yield

    def changed_paths(self) -> set[str]:
        """Module paths whose output the adapter changes."""
        return set(self.factors)

    def release(self) -> None:
        self._modules.clear()


def _refuse_adapted_recipient(recipient: nn.Module) -> None:
    from peft.tuners.tuners_utils import BaseTunerLayer

    adapted = [name for name, m in recipient.named_modules() if isinstance(m, BaseTunerLayer)]
    if adapted:
        raise ValueError(
            f"the recipient has PEFT layers injected ({adapted[:3]} ...): a PeftModel built on the recipient "
            "itself changes the recipient. Pass the plain base model as the recipient and the adapter folder as "
            "the donor (peft_model.save_pretrained(folder)), or build the PeftModel on a separate copy"
        )


def _check_config(peft_config, where: str) -> None:
    from peft import PeftType

    if peft_config.peft_type != PeftType.LORA:
        raise ValueError(
            f"adapter {where} is a {peft_config.peft_type.value} adapter; weightgraft grafts LoRA adapters only. "
            "Merge it into a copy of the base model (merge_and_unload()) and pass that model as the donor"
        )
    used = [label for field, label in UNSUPPORTED_SWITCHES.items() if getattr(peft_config, field, None)]
    if getattr(peft_config, "bias", "none") != "none":
        used.append(f"trained base-model biases (bias={peft_config.bias!r})")
    if used:
        raise ValueError(
            f"adapter {where} uses {', '.join(used)}, which an adapter donor does not support; merge it into a "
            "copy of the base model (merge_and_unload()) and pass that model as the donor"
        )


def _layer_factors(path: str, layer: nn.Module, adapter_name: str, tensors: dict[str, torch.Tensor]) -> LoraFactors:
    """Factors of one peft LoRA layer; `tensors` maps the layer's parameter names to their values."""
    from peft.tuners.lora import layer as lora_layers

    if adapter_name in getattr(layer, "lora_variant", {}):
        variant = type(layer.lora_variant[adapter_name]).__name__
        raise ValueError(f"{path} uses the LoRA variant {variant}, which an adapter donor does not support")
    scaling = float(layer.scaling[adapter_name])
    if isinstance(layer, lora_layers.Embedding):
        scale = layer._get_embed_scale()
        return LoraFactors(
            A=tensors[f"lora_embedding_A.{adapter_name}"],
            B=tensors[f"lora_embedding_B.{adapter_name}"],
            bias=None,
            scaling=scaling,
            embedding=True,
            embed_scale=None if scale is None else scale.detach().clone(),
        )
    if type(layer) is not lora_layers.Linear:
        raise ValueError(
            f"{path} is a LoRA {type(layer).__name__} layer; an adapter donor supports Linear and Embedding"
        )
    return LoraFactors(
        A=tensors[f"lora_A.{adapter_name}.weight"],
        B=tensors[f"lora_B.{adapter_name}.weight"],
        bias=tensors.get(f"lora_B.{adapter_name}.bias"),
        scaling=scaling,
    )


def _lora_layers(model: nn.Module) -> dict[str, nn.Module]:
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def _factors_from_peft_model(peft_model, recipient: nn.Module):
    names = list(peft_model.active_adapters)
    if len(names) != 1:
        raise ValueError(f"the PeftModel has {len(names)} active adapters {names}; activate one (set_adapter)")
    name = names[0]
    peft_config = peft_model.peft_config[name]
    _check_config(peft_config, f"{name!r} of the PeftModel")
    base = peft_model.get_base_model()
    if {id(p) for p in base.parameters()} & {id(p) for p in recipient.parameters()}:
        raise ValueError("the PeftModel shares weights with the recipient; build it on a separate copy of the base")
    model_type = getattr(base.config, "model_type", None)
    if model_type != recipient.config.model_type:
        raise ValueError(
            f"the PeftModel adapts a {model_type!r} model; the recipient is {recipient.config.model_type!r}"
        )
    factors = {}
    for path, layer in _lora_layers(base).items():
        if name not in layer.scaling:
            continue
        tensors = {n: p.detach() for n, p in layer.named_parameters() if name in n.split(".")}
        factors[path] = _layer_factors(path, layer, name, tensors)
    return peft_config, factors


def _factors_from_folder(folder: Path, recipient: nn.Module):
    from peft import PeftConfig, inject_adapter_in_model, load_peft_weights

    if not (folder / PEFT_CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{folder} has no {PEFT_CONFIG_FILE}; save the adapter with PeftModel.save_pretrained")
    if not (folder / PEFT_WEIGHTS_FILE).is_file():
        pickles = pickled_files(folder)
        why = (
            f", only pickled weights {pickles}, which weightgraft never loads (unpickling can run code); "
            "save the adapter again with safe_serialization=True"
        )
        raise FileNotFoundError(f"{folder} has no {PEFT_WEIGHTS_FILE}{why if pickles else ''}")
    peft_config = PeftConfig.from_pretrained(str(folder))
    _check_config(peft_config, str(folder))
    # peft decides which modules the adapter targets, and with which scaling, on an empty copy of
    # the recipient's architecture; the weights come from the adapter file.
    with init_empty_weights():
        skeleton = type(recipient)(recipient.config)
    try:
        inject_adapter_in_model(peft_config, skeleton, adapter_name="default", low_cpu_mem_usage=True)
    except ValueError as error:
        raise ValueError(
            f"adapter {folder} does not fit the recipient (is it for another base model?): {error}"
        ) from error
    saved = load_peft_weights(str(folder), device="cpu")
    factors, expected = {}, set()
    for path, layer in _lora_layers(skeleton).items():
        local = {n: p for n, p in layer.named_parameters() if "default" in n.split(".")}
        keys = {n: SAVED_PREFIX + path + "." + n.replace(".default", "") for n in local}
        expected |= set(keys.values())
        missing = [k for k in keys.values() if k not in saved]
        if missing:
            raise ValueError(
                f"adapter {folder} lacks tensors {missing[:4]} for the recipient's {path}; is it for another base model?"
            )
        wrong = [
            f"{keys[n]} {tuple(saved[keys[n]].shape)} (the recipient needs {tuple(p.shape)})"
            for n, p in local.items()
            if saved[keys[n]].shape != p.shape
        ]
        if wrong:
            raise ValueError(f"adapter {folder} is for another base model: shapes differ: {'; '.join(wrong[:4])}")
        factors[path] = _layer_factors(path, layer, "default", {n: saved[k] for n, k in keys.items()})
    _check_saved_base_layers(saved, expected, recipient, folder)
    unexpected = sorted(k for k in set(saved) - expected if not k.endswith(BASE_LAYER_SUFFIX))
    if unexpected:
        raise ValueError(
            f"adapter {folder} has tensors for modules the recipient lacks: {unexpected[:4]}"
            f"{' ...' if len(unexpected) > 4 else ''}; is it for another base model?"
        )
    return peft_config, factors


def _check_saved_base_layers(saved: dict, expected: set[str], recipient: nn.Module, folder: Path) -> None:
    """Saved base weights (of adapted embeddings) must be the recipient's own, or the adapter's
    model is not "the recipient plus deltas"."""
    for key in sorted(set(saved) - expected):
        if not key.endswith(BASE_LAYER_SUFFIX):
            continue
        name = key.removeprefix(SAVED_PREFIX).removesuffix(BASE_LAYER_SUFFIX) + ".weight"
        try:
            mine = recipient.get_parameter(name)
        except AttributeError as missing:
            raise ValueError(
                f"adapter {folder} holds {key}, a weight the recipient lacks; is it for another base model?"
            ) from missing
        if mine.device.type == "meta":
            raise ValueError(
                f"adapter {folder} holds its own copy of {name} and the recipient's is offloaded, so the two cannot "
                "be compared; load the recipient with that module in memory"
            )
        if mine.shape != saved[key].shape or not torch.equal(mine.detach().cpu().to(saved[key].dtype), saved[key]):
            raise ValueError(
                f"adapter {folder} carries its own {name} (saved with the embedding layers), which differs from the "
                "recipient's (a resized or retrained vocabulary?); merge it (merge_and_unload()) and pass that model "
                "as the donor"
            )


def _check_base_name(peft_config, recipient: nn.Module, where: str) -> None:
    adapter_base = (peft_config.base_model_name_or_path or "").rstrip("/")
    recipient_name = (getattr(recipient.config, "_name_or_path", "") or "").rstrip("/")
    if adapter_base and recipient_name and Path(adapter_base).name.lower() != Path(recipient_name).name.lower():
        raise ValueError(
            f"adapter {where} was trained on {adapter_base!r}, but the recipient is {recipient_name!r}. Graft an "
            "adapter into its own base model; if the two names are one model, pass check_base_model=False"
        )


def _check_shapes(factors: dict[str, LoraFactors], recipient: nn.Module, where: str) -> None:
    """Each delta must have the recipient module's input and output widths."""
    problems = []
    for path, f in factors.items():
        try:
            module = recipient.get_submodule(path)
        except AttributeError:
            problems.append(f"{path} is not a module of the recipient")
            continue
        weight = getattr(module, "weight", None)
        if weight is None:
            problems.append(f"{path} has no weight")
            continue
        if f.embedding or type(module).__name__ == "Conv1D":  # [vocab, dim]; GPT-2's Conv1D stores [in, out]
            need_in, need_out = weight.shape[0], weight.shape[1]
        else:
            need_in, need_out = weight.shape[1], weight.shape[0]
        if f.A.shape[-1] != need_in or f.B.shape[0] != need_out:
            problems.append(
                f"{path}: adapter maps {f.A.shape[-1]} -> {f.B.shape[0]} features, the recipient's module "
                f"{need_in} -> {need_out}"
            )
    if problems:
        raise ValueError(f"adapter {where} is for another base model: {'; '.join(problems[:4])}")
