"""What a finetune trains on: its texts as token rows, right-padded batches whose padding adds
nothing to the loss, and the causal LM loss over the labelled positions only."""

from __future__ import annotations

import torch

from weightgraft.data.batching import right_pad


class TextDataset(torch.utils.data.Dataset):
    def __init__(self, rows: list[list[int]]):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.rows[index]}


class PadCollator:
    """Right-pads a batch; padding gets label -100 so it adds nothing to the loss."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, examples: list[dict]) -> dict:
        ids, mask = right_pad([e["input_ids"] for e in examples], self.pad_id)
        labels = ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def encode_texts(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    rows = []
    for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]:
        ids = list(ids)
        if tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
        rows.append(ids[:max_length])
    return rows


def labelled_loss(model, inputs: dict, num_items_in_batch=None):
    """Next-token cross-entropy over the positions whose label is not -100, with the unembedding
    applied to those positions' hidden states only (a pre-hook hands it just them, so whatever
    the model does after it, such as Gemma's logit soft-capping, still applies). Summed and divided
    by `num_items_in_batch` when Trainer counts it, else averaged: as transformers' own loss."""
    targets = inputs["labels"][:, 1:]
    labelled = targets != -100
    head = getattr(model, "module", model).get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda _module, args: (args[0][:, :-1][labelled].unsqueeze(0),))
    try:
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    finally:
        handle.remove()
    logits = outputs.logits[0].float()
    if num_items_in_batch is None:
        return torch.nn.functional.cross_entropy(logits, targets[labelled]), outputs
    summed = torch.nn.functional.cross_entropy(logits, targets[labelled], reduction="sum")
    return summed / num_items_in_batch, outputs
