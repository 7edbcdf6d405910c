"""What a finetune trains: the parts it keeps fixed (embeddings, unembedding, final norm, first
blocks) and, for a LoRA finetune, the low-rank adapters trained in their place."""

from __future__ import annotations

import re

import torch

from weightgraft.data.data_errors import DataError

FINAL_NORM_NAMES = ("norm", "ln_f", "final_layer_norm")  # Llama/Gemma/Phi-3/OLMo-2, GPT-2, GPT-NeoX


def final_norm(net) -> torch.nn.Module:
    """The norm applied just before the unembedding, found by the usual Hugging Face names."""
    for name in FINAL_NORM_NAMES:
        module = getattr(net.base_model, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    raise DataError(
        f"no final norm found under the names {list(FINAL_NORM_NAMES)} in {type(net).__name__}; "
        "finetune without --freeze-final-norm"
    )


BLOCK_NAME = re.compile(r"\.(?:layers|h)\.(\d+)\.")  # Llama/Gemma/NeoX `layers.i.`, GPT-2 `h.i.`


def freeze_first_blocks(net, n: int) -> None:
    """Stop gradients into decoder blocks 0..n-1 (found by their parameter names)."""
    found = 0
    for name, parameter in net.named_parameters():
        match = BLOCK_NAME.search(name)
        if match and int(match.group(1)) < n:
            parameter.requires_grad_(False)
            found += 1
    if not found:
        raise DataError(f"no decoder-block parameters named like 'layers.N.' or 'h.N.' in {type(net).__name__}")


def freeze_parts(net, config) -> None:
    """Keep the parts `config` (a FinetuneConfig) names fixed (embeddings, unembedding, final norm, first blocks)."""
    if config.freeze_embeddings:
        net.get_input_embeddings().weight.requires_grad_(False)
    if config.freeze_unembeddings:
        out = net.get_output_embeddings()
        if out is None:
            raise DataError("this model has no separate output embedding to freeze")
        out.weight.requires_grad_(False)
    if config.freeze_final_norm:
        for parameter in final_norm(net).parameters():
            parameter.requires_grad_(False)
    if config.freeze_layers:
        freeze_first_blocks(net, config.freeze_layers)
    if config.freeze_embeddings != config.freeze_unembeddings and (
        net.get_input_embeddings().weight is net.get_output_embeddings().weight
    ):
        raise DataError("this model ties embeddings and unembeddings: freeze both or neither")


def with_lora(net, rank: int):
    """LoRA adapters of `rank` injected into `net`'s block linears (peft trains them in place, the
    other weights frozen); the PeftModel that merges them back, or None for a full finetune."""
    if not rank:
        return None
    from peft import LoraConfig, get_peft_model  # here: peft costs ~2 s of start-up

    return get_peft_model(net, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, target_modules="all-linear"))
