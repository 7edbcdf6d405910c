"""The contract between a chunk's rows and a way of computing them (`ChunkMethod`).

A row is one (example, condition) pair of a batch; a method turns a batch's rows into logits
over the columns that are scored. `execute.compute_chunk` builds the rows, asks the chunk's
method for their logits and scores them, whichever method it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch

from weightgraft.engine.grafter import Grafter
from weightgraft.experiments.conditions import Condition, ResolvedGraft
from weightgraft.experiments.config import RunConfig
from weightgraft.experiments.example_rows import Example


@dataclass(frozen=True)
class Row:
    """One row of a forward: the example's index in its batch, the condition, and per graft
    the boolean mask over the row's tokens (prompt, then the target's teacher-forced tokens)."""

    example: int
    condition: Condition
    masks: list[tuple[list[bool], ResolvedGraft]]


class ChunkMethod(Protocol):
    """One way to compute a chunk (conditions sharing recipient, donors and method)."""

    def logits(self, batch: list[Example], rows: list[Row]) -> tuple[torch.Tensor, list[int]]:
        """Logits [rows, columns, vocab] for `rows` of `batch`, and for each row the column
        that scores the target's first token (the prompt's last token); the target's further
        tokens are scored in the columns after it (the scored token, `Example.scored`, among them)."""
        ...


class LoadedModels(Protocol):
    """What choosing a chunk's method reads of the run's models, loaded once
    (`execute.Resources`). A protocol, because `execute` computes chunks through the methods and
    so sits above them: the methods may not import it."""

    config: RunConfig

    def model(self, key: str) -> torch.nn.Module: ...

    def grafter(self, recipient: str, donors: tuple[str, ...]) -> Grafter: ...
