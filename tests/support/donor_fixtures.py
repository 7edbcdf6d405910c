"""Tiny saved checkpoints and LoRA adapters for the donor tests, plus one padded batch of grafts."""

from __future__ import annotations

import copy
from pathlib import Path

import torch

from tiny_model_fixtures import make_config, make_model

PAD = 0
LORA_TARGETS = {
    "llama": ["q_proj", "v_proj", "o_proj", "up_proj", "down_proj"],
    "qwen3": ["k_proj", "o_proj", "gate_proj", "down_proj"],
    "gpt2": ["c_attn", "c_fc"],
}


def save_model(model, folder: Path, **kwargs) -> Path:
    model.save_pretrained(folder, safe_serialization=True, **kwargs)
    return folder


def lora_model(arch: str, seed: int, **config):
    """A PeftModel over a fresh copy of the recipient `make_model(arch, seed)`, with random A and B."""
    from peft import LoraConfig, get_peft_model

    settings = dict(r=4, lora_alpha=8, target_modules=LORA_TARGETS[arch], init_lora_weights=False)
    settings.update(config)
    if arch == "gpt2":
        settings["fan_in_fan_out"] = True  # GPT-2's Conv1D stores [in, out]
    torch.manual_seed(seed + 17)
    return get_peft_model(make_model(arch, seed), LoraConfig(**settings))


def merged_copy(peft_model):
    return copy.deepcopy(peft_model).merge_and_unload().eval()


def padded_batch(vocab: int = 151):
    """Right- and left-padded rows of different lengths, each with its own grafts."""
    from weightgraft import Graft

    generator = torch.Generator().manual_seed(3)
    lengths = [7, 4, 9, 6]
    ids = torch.full((4, 9), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        row = torch.randint(1, vocab, (n,), generator=generator)
        if b % 2:  # left-padded
            ids[b, 9 - n :], mask[b, 9 - n :] = row, 1
        else:
            ids[b, :n], mask[b, :n] = row, 1
    row_grafts = [
        Graft("last", "last_half", ["o", "mlp"]),
        [Graft([0, 1], [0], "attn"), Graft("last", "all", ["up", "down"])],
        Graft(slice(2, 5), "all", "all"),
        None,
    ]
    return ids, mask, row_grafts


def config_of(arch: str):
    return make_config(arch)
