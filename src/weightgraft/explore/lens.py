"""A logit lens through a grafted pass: the target's log-probability and rank after each block.

Each row (the recipient, a donor alone, the current graft) runs once through the engine; a hook on
every decoder block keeps the residual stream at the scoring position, which is then read out
through the recipient's final norm and unembedding (`engine.activations.readout`, the basis of the
API's `Grafter.lens` too), as the paper's runs read every position (its conditions: "the
recipient's final norm and unembedding"). Every line is thus read in one basis;
the model's own output at the end of each row is given beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from weightgraft.adapters import adapter_for
from weightgraft.engine.activations import readout
from weightgraft.engine.grafter import Grafter


def _scores(logits: torch.Tensor, target: int) -> tuple[list[float], list[int]]:
    """Per row: the target's log-probability and rank (1: the most likely token)."""
    logprobs = torch.log_softmax(logits.float(), -1)
    chosen = logprobs[:, target]
    ranks = (logprobs > chosen[:, None]).sum(-1) + 1
    return chosen.tolist(), ranks.tolist()


@torch.no_grad()
def logit_lens(grafter: Grafter, ids: list[int], target: int, rows: Sequence[list | None]) -> dict:
    """For each row's grafts: the target's log-probability and rank after every block (read
    through the recipient's head) and in the row's own output. Rows run in full, one pass, with
    prefix and layer sharing off so that every row's residual stream is its own."""
    model = grafter.recipient
    blocks = adapter_for(model).decoder_layers(model)
    kept: list[torch.Tensor | None] = [None] * len(blocks)

    def keep(index: int):
        def hook(_module, _args, output):
            hidden = output[0] if isinstance(output, tuple) else output
            kept[index] = hidden[:, -1].detach().clone()

        return hook

    handles = [block.register_forward_hook(keep(i)) for i, block in enumerate(blocks)]
    sharing, grafter.share_prefixes = grafter.share_prefixes, False
    try:
        tensor = torch.tensor([ids]).expand(len(rows), -1)
        output = grafter.last_logits(tensor, row_grafts=list(rows))
    finally:
        grafter.share_prefixes = sharing
        for handle in handles:
            handle.remove()
    per_layer = [_scores(readout(model, hidden.to(output.device)), target) for hidden in kept]
    final_logprob, final_rank = _scores(output, target)
    return {
        "logprob": [[per_layer[layer][0][row] for layer in range(len(blocks))] for row in range(len(rows))],
        "rank": [[per_layer[layer][1][row] for layer in range(len(blocks))] for row in range(len(rows))],
        "output_logprob": final_logprob,
        "output_rank": final_rank,
    }
