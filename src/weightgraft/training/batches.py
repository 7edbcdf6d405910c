"""What a finetune trains on: its texts as token rows, right-padded batches whose padding adds
nothing to the loss, and the causal LM loss over the labelled positions only."""

from __future__ import annotations

import torch

from weightgraft.data.batching import right_pad


class TextDataset(torch.utils.data.Dataset):
    """Token rows; with `general`, each row says whether it is general text (which a distilled
    loss scores apart, `training.distill`)."""

    def __init__(self, rows: list[list[int]], general: list[bool] | None = None):
        if general is not None and len(general) != len(rows):
            raise ValueError(f"{len(general)} general flags for {len(rows)} rows")
        self.rows = rows
        self.general = general

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        item: dict = {"input_ids": self.rows[index]}
        if self.general is not None:
            item["general"] = self.general[index]
        return item


class PadCollator:
    """Right-pads a batch; padding gets label -100 so it adds nothing to the loss."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, examples: list[dict]) -> dict:
        ids, mask = right_pad([e["input_ids"] for e in examples], self.pad_id)
        labels = ids.masked_fill(mask == 0, -100)
        batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        if "general" in examples[0]:
            batch["general"] = torch.tensor([e["general"] for e in examples])
        return batch


def encode_texts(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    rows = []
    for ids in tokenizer(texts, add_special_tokens=True)["input_ids"]:
        ids = list(ids)
        if tokenizer.eos_token_id is not None:
            ids.append(tokenizer.eos_token_id)
        rows.append(ids[:max_length])
    return rows


def labelled_logits(model, inputs: dict, labelled: torch.Tensor | tuple[torch.Tensor, torch.Tensor]):
    """[labelled positions, vocab]: the logits predicting each labelled next token, with the
    unembedding applied to those positions' hidden states only (a pre-hook hands it just them, so
    whatever the model does after it, such as Gemma's logit soft-capping, still applies); and the
    model's outputs. `labelled`: [rows, length - 1], True where a label is (row-major order), or
    (row indices, column indices) of the positions in the order wanted."""
    head = getattr(model, "module", model).get_output_embeddings()
    handle = head.register_forward_pre_hook(lambda _module, args: (args[0][:, :-1][labelled].unsqueeze(0),))
    try:
        outputs = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
    finally:
        handle.remove()
    return outputs.logits[0], outputs


def labelled_loss(model, inputs: dict, num_items_in_batch=None):
    """Next-token cross-entropy over the positions whose label is not -100 (`labelled_logits`).
    Summed and divided by `num_items_in_batch` when Trainer counts it, else averaged: as
    transformers' own loss."""
    targets = inputs["labels"][:, 1:]
    labelled = targets != -100
    logits, outputs = labelled_logits(model, inputs, labelled)
    logits = logits.float()
    if num_items_in_batch is None:
        return torch.nn.functional.cross_entropy(logits, targets[labelled]), outputs
    summed = torch.nn.functional.cross_entropy(logits, targets[labelled], reduction="sum")
    return summed / num_items_in_batch, outputs
