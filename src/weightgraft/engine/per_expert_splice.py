"""Splicing a "per_expert" module: one that sees every token once per expert, expert-major
([experts * tokens, ...], row e * tokens + t is expert e on token t), as Llama 4's MoE block
feeds its experts the tokens repeated per expert and scaled by the router's scores.

Row e * tokens + t depends on expert e's weights alone, so grafting the experts at token t is
replacing rows e * tokens + t for every e with the donor's, and grafting experts S there is
replacing only the rows of the experts in S: each token's experts compute with the weights of
the model that owns them, the routing (the input's scaling) the recipient's unless the router
is grafted too.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from weightgraft.adapters.call_forms import call_per_expert, experts_count, per_expert_rows


def splice_per_expert(
    path: str,
    modules: Mapping[int, nn.Module],
    x: torch.Tensor,
    output: torch.Tensor,
    splices: list,
    recipient_module: nn.Module,
) -> torch.Tensor:
    """`output` (changed in place) with the grafted tokens' rows of the grafted experts replaced."""
    count = experts_count(recipient_module)
    if count is None or not isinstance(output, torch.Tensor) or x.shape[0] % count or output.shape[0] != x.shape[0]:
        raise RuntimeError(
            f"cannot graft {path!r} as a 'per_expert' module: its input and output must be [experts * tokens, ...]; "
            "check the call_forms of the architecture's adapter"
        )
    tokens = x.shape[0] // count
    everyone = torch.arange(count, device=output.device)
    for splice in splices:
        rows = next((r for (batch, seq), r in splice.rows.items() if batch * seq == tokens), None)
        if rows is None:
            raise RuntimeError(
                f"graft rows for {sorted(splice.rows)} (batch, seq) do not fit the {tokens} tokens of {path!r}"
            )
        rows = rows.to(output.device)
        if rows.numel() == 0:
            continue
        if splice.columns is not None or splice.inputs is not None:
            raise RuntimeError(f"cannot graft {path!r}: a 'per_expert' module is grafted whole, or by experts")
        donor_module = modules[splice.donor]
        donor = call_per_expert(donor_module, x, rows, tokens, count).to(output.dtype)
        if getattr(donor_module, "adds_to_output", False):  # an adapter's delta on the recipient's output
            donor = output.index_select(0, per_expert_rows(rows, tokens, everyone)) + donor
        experts = everyone if splice.experts is None else splice.experts.to(output.device)
        picked = per_expert_rows(torch.arange(rows.numel(), device=output.device), rows.numel(), experts)
        output.index_copy_(0, per_expert_rows(rows, tokens, experts), donor.index_select(0, picked))
    return output
