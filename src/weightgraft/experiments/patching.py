"""Activation patching: the donor's residual stream copied into the recipient's run.

The donor runs once per distinct example; the recipient runs once per row (example x
condition), and a forward hook on each decoder block replaces the block's output at the row's
chosen positions with the donor's output of the same block at the same positions. Everything
else (embeddings, final norm, unembedding) is the recipient's. Rows are right-padded, so a
real-token index is also the tensor index.
"""

from __future__ import annotations

import torch


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
