"""Activation patching: the donor's residual stream copied into the recipient's run.

The donor runs once per distinct example; the recipient runs once per row (example x
condition), and a forward hook on each decoder block replaces the block's output at the row's
chosen positions with the donor's output of the same block at the same positions. Everything
else (embeddings, final norm, unembedding) is the recipient's. Rows are right-padded, so a
real-token index is also the tensor index.
"""

from __future__ import annotations

import torch

from weightgraft.adapters import adapter_for
from weightgraft.data.batching import right_pad
from weightgraft.experiments.example_rows import Example
from weightgraft.experiments.layers import concrete_layers
from weightgraft.experiments.methods.chunk_method import Row


def _hidden(output):
    return output if torch.is_tensor(output) else output[0]


def _replace(output, hidden):
    if torch.is_tensor(output):
        return hidden
    return (hidden, *output[1:])


@torch.no_grad()
def patched_logits(
    recipient,
    donor,
    layers_of,
    example_ids: torch.Tensor,
    example_mask: torch.Tensor,
    row_example: torch.Tensor,
    patch_mask: torch.Tensor,
) -> torch.Tensor:
    """Recipient logits [rows, seq, vocab] with the donor's block outputs patched in.

    example_ids/example_mask: [examples, seq] right-padded donor inputs; row_example: [rows]
    index of each row's example; patch_mask: [rows, layers, seq] bool, where to patch.
    `layers_of(model)` returns a model's decoder blocks (the adapter's `decoder_layers`)."""
    donor_blocks, recipient_blocks = layers_of(donor), layers_of(recipient)
    if len(donor_blocks) != len(recipient_blocks) or len(recipient_blocks) != patch_mask.shape[1]:
        raise ValueError("recipient, donor and patch mask disagree on the number of layers")
    captured: list[torch.Tensor | None] = [None] * len(donor_blocks)
    needed = patch_mask.any(dim=(0, 2)).tolist()

    def capture(index):
        def hook(_module, _args, output):
            captured[index] = _hidden(output).detach()

        return hook

    handles = [block.register_forward_hook(capture(i)) for i, block in enumerate(donor_blocks) if needed[i]]
    try:
        donor(input_ids=example_ids, attention_mask=example_mask, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()

    def patch(index):
        def hook(_module, _args, output):
            hidden = _hidden(output)
            source = captured[index][row_example].to(hidden.dtype)
            where = patch_mask[:, index, :, None]
            return _replace(output, torch.where(where, source, hidden))

        return hook

    handles = [block.register_forward_hook(patch(i)) for i, block in enumerate(recipient_blocks) if needed[i]]
    try:
        ids = example_ids[row_example]
        mask = example_mask[row_example]
        return recipient(input_ids=ids, attention_mask=mask, use_cache=False).logits
    finally:
        for handle in handles:
            handle.remove()


class ActivationPatching:
    """The `activations` method: a chunk's rows as the recipient's runs with the donor's block
    outputs patched in at each row's positions and layers (whole blocks: components BLOCKS)."""

    def __init__(self, recipient, donor, pad: int, device: str):
        self.recipient, self.donor = recipient, donor
        self.layers_of = adapter_for(recipient).decoder_layers
        self.num_layers = len(self.layers_of(recipient))
        self.pad, self.device = pad, device

    def logits(self, batch: list[Example], rows: list[Row]) -> tuple[torch.Tensor, list[int]]:
        # The donor runs once per example of the batch, right-padded; each row indexes its example.
        ids, attn = right_pad([ex.input_ids + ex.target_ids[:-1] for ex in batch], self.pad)
        ids, attn = ids.to(self.device), attn.to(self.device)
        patch = torch.zeros(len(rows), self.num_layers, ids.shape[1], dtype=torch.bool, device=self.device)
        for r, row in enumerate(rows):
            for mask, graft in row.masks:
                layers = concrete_layers(graft.layers, self.num_layers)
                patch[r, layers, : len(mask)] |= torch.tensor(mask, device=self.device)
        row_example = torch.tensor([row.example for row in rows], device=self.device)
        logits = patched_logits(self.recipient, self.donor, self.layers_of, ids, attn, row_example, patch)
        return logits, [len(batch[row.example].input_ids) - 1 for row in rows]  # right-padded rows
