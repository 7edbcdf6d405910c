"""Weight grafting (the `weights` method): a chunk's rows as one grafted pass of the engine."""

from __future__ import annotations

import torch

from weightgraft.data.batching import align_on
from weightgraft.engine.graft import Graft
from weightgraft.experiments.conditions import ResolvedGraft
from weightgraft.experiments.conditions.components import resolve_for_model
from weightgraft.experiments.example_rows import Example
from weightgraft.experiments.layers import engine_layers
from weightgraft.experiments.methods.chunk_method import Row


class WeightGrafting:
    """Rows through a `Grafter` of the chunk's recipient and donors, each with its own grafts.

    grafter: the engine's Grafter (one donor: the single-donor form, whose Grafts name none);
    tied: the recipient's unembedding is its token embedding; pad: the padding token id."""

    def __init__(self, grafter, donors: tuple[str, ...], tied: bool, pad: int, device: str):
        self.grafter, self.tied, self.pad, self.device = grafter, tied, pad, device
        self.components = list(grafter.components)
        self.name_donor = len(donors) > 1

    def logits(self, batch: list[Example], rows: list[Row]) -> tuple[torch.Tensor, list[int]]:
        n = self.grafter.num_layers
        row_grafts = [
            [engine_graft(m, g, self.components, n, self.name_donor, self.tied) for m, g in row.masks] or None
            for row in rows
        ]
        # Aligned on the prompt's last token: its prefix shares one segment, and only the
        # scored columns (that token and the target's) reach the unembedding.
        seqs = [batch[row.example].input_ids + batch[row.example].target_ids[:-1] for row in rows]
        ids, attn, column = align_on(seqs, [len(batch[row.example].input_ids) - 1 for row in rows], self.pad)
        ids, attn = ids.to(self.device), attn.to(self.device)
        logits = self.grafter.logits(
            ids, row_grafts=row_grafts, attention_mask=attn, logits_to_keep=ids.shape[1] - column
        )
        return logits, [0] * len(rows)


def engine_graft(
    mask: list[bool], graft: ResolvedGraft, available: list[str], num_layers: int, name_donor: bool, tied: bool = False
) -> Graft:
    """The engine's Graft for one row: concrete positions, layers and components (`tied`: the
    recipient's unembedding is its token embedding, which the authors' every-weight graft
    swaps together); the donor is named only when the Grafter holds several (a one-donor
    Grafter takes Grafts without one), a shaped graft's by its shaped name; heads or neurons
    narrow the Graft as the condition says."""
    kwargs = {"donor": graft.donor_key} if name_donor else {}
    if graft.heads is not None:
        kwargs["heads"] = list(graft.heads)
    if graft.neurons is not None:
        kwargs["neurons"] = list(graft.neurons)
    return Graft(
        positions=mask,
        layers=engine_layers(graft.layers, num_layers),
        components=resolve_for_model(graft.components, available, tied),
        **kwargs,
    )
