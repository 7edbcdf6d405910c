"""Pretraining a small Llama-style model from scratch on CPU, in the spirit of nanoGPT.

Documents are wrapped as BOS text EOS, concatenated and cut into fixed-length blocks; AdamW with
linear warmup and cosine decay. The result is a standard Hugging Face directory (safetensors,
tokenizer, config) plus `training_config.json` recording how it was made.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import LlamaConfig, LlamaForCausalLM

from weightgraft.atomic import write_json
from weightgraft.folder_install import atomic_directory
from weightgraft.training import TRAINING_RECORD


@dataclass
class PretrainConfig:
    hidden_size: int = 128
    num_layers: int = 8
    num_heads: int = 4
    intermediate_size: int = 384
    block_size: int = 128
    batch_size: int = 16
    steps: int = 600
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.05
    seed: int = 0


def make_model(config: PretrainConfig, tokenizer) -> LlamaForCausalLM:
    torch.manual_seed(config.seed)
    llama = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=max(256, config.block_size),
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return LlamaForCausalLM(llama)


def pack_documents(documents: list[str], tokenizer, block_size: int) -> torch.Tensor:
    """[n_blocks, block_size] token ids: BOS doc EOS BOS doc EOS ... cut into blocks."""
    ids: list[int] = []
    eos = tokenizer.eos_token_id
    for row in tokenizer(documents)["input_ids"]:  # each row starts with BOS
        ids.extend(row)
        ids.append(eos)
    n_blocks = len(ids) // block_size
    if n_blocks == 0:
        raise ValueError("not enough text for one block; give more documents or a smaller block_size")
    return torch.tensor(ids[: n_blocks * block_size]).view(n_blocks, block_size)


def learning_rate(step: int, config: PretrainConfig) -> float:
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - config.warmup_steps)
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def _optimizer(model: LlamaForCausalLM, config: PretrainConfig) -> torch.optim.AdamW:
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.95),
    )


def train_steps(
    model: LlamaForCausalLM, blocks: torch.Tensor, config: PretrainConfig, steps: int, progress: bool = False
) -> list[float]:
    """The first `steps` of the recipe's `config.steps` (the schedule is the whole run's): the
    losses. `steps < config.steps` stops early, on the same path as the whole run (the shipped
    weights' reproduction check)."""
    optimizer = _optimizer(model, config)
    generator = torch.Generator().manual_seed(config.seed)
    order = torch.randperm(len(blocks), generator=generator)
    model.train()
    losses = []
    bar = tqdm(range(steps), desc="pretrain", disable=not progress)
    cursor = 0
    for step in bar:
        if cursor + config.batch_size > len(order):
            order, cursor = torch.randperm(len(blocks), generator=generator), 0
        batch = blocks[order[cursor : cursor + config.batch_size]]
        cursor += config.batch_size
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, config)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    model.eval()
    return losses


def save_model(model: LlamaForCausalLM, tokenizer, out_dir: Path, record: dict) -> Path:
    """The model, its tokenizer and `record` (training_config.json) as one folder, atomically."""
    with atomic_directory(out_dir, command="pretrain") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_json(tmp / TRAINING_RECORD, record)
    return Path(out_dir)


def pretrain(
    documents: list[str],
    tokenizer,
    config: PretrainConfig,
    out_dir: Path,
    progress: bool = True,
    extra_record: dict | None = None,
) -> Path:
    """Train a fresh model on `documents` for `config.steps` steps and save it atomically."""
    blocks = pack_documents(documents, tokenizer, config.block_size)
    model = make_model(config, tokenizer)
    start = time.time()
    losses = train_steps(model, blocks, config, config.steps, progress)
    record = {
        "kind": "pretrain",
        **asdict(config),
        "n_blocks": len(blocks),
        "tokens_seen": config.steps * config.batch_size * config.block_size,
        "final_loss": sum(losses[-20:]) / len(losses[-20:]),
        "seconds": round(time.time() - start, 1),
        **(extra_record or {}),
    }
    return save_model(model, tokenizer, out_dir, record)
