"""Length checks before finetuning: what cannot fit the model is refused, what is cut is said.

Kept apart from `finetune` so that it can be used (and tested) without importing `transformers`.
"""

from __future__ import annotations

from pathlib import Path

from weightgraft.data.data_errors import DataError
from weightgraft.errors import warn


def check_lengths(tokenizer, model_config, train_texts: list[str], validation, max_length: int, data_dir: Path) -> None:
    """A validation prompt longer than the model's context is an error (it cannot be scored); a
    training text longer than `max_length` is cut, which a warning says."""
    context = getattr(model_config, "max_position_embeddings", None)
    if context:
        lengths = [len(ids) for ids in tokenizer([p.text + p.target for p in validation])["input_ids"]]
        too_long = [(n, p) for n, p in zip(lengths, validation) if n > context]
        if too_long:
            n, prompt = max(too_long, key=lambda item: item[0])
            raise DataError(
                f"{data_dir}: {len(too_long)} validation prompt(s) are longer than the model's "
                f"context of {context} tokens (prompt {prompt.id}: {n} tokens); shorten the names"
            )
    lengths = [len(ids) + 1 for ids in tokenizer(train_texts)["input_ids"]]
    cut = sum(n > max_length for n in lengths)
    if cut:
        warn(
            f"{data_dir}: {cut} of {len(train_texts)} training texts are longer than max_length "
            f"{max_length} tokens (longest {max(lengths)}) and are cut; check for very long names"
        )
