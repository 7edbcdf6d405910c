"""What the Grafter's views (activations, the applied graft, scoring) use of the Grafter, as a
Protocol: those modules run passes through it, and `grafter.py` builds its views from them, so
naming the class itself would make the two import each other."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import torch
from torch import nn

from weightgraft.adapters.base import Adapter
from weightgraft.engine.graft import Key
from weightgraft.engine.graft_index import GraftIndex
from weightgraft.engine.graft_masks import GraftMasks
from weightgraft.engine.hooks import Splice, SpliceHooks
from weightgraft.engine.layer_sharing import LayerGroups, SharedLayers


class GraftPasses(Protocol):
    """A recipient with its donors, able to plan and run grafted passes (`engine.grafter.Grafter`)."""

    recipient: nn.Module
    adapter: Adapter
    index: GraftIndex
    keys: list[Key]
    num_layers: int
    share_prefixes: bool
    _seq_dims: dict[str, int]
    _call_forms: dict[str, str]

    @property
    def device(self) -> torch.device: ...

    def logits(self, input_ids, grafts=None, row_grafts=None, attention_mask=None, logits_to_keep: int = 0): ...

    def _graft_masks(self, grafts, row_grafts, mask: torch.Tensor, roles=None) -> GraftMasks: ...

    def _running(self, grafted: GraftMasks) -> AbstractContextManager[tuple[SpliceHooks, SharedLayers]]: ...

    def _splices(
        self, chunk: GraftMasks, paths: list[str], keep: int, groups: Sequence[LayerGroups] = ()
    ) -> dict[str, list[Splice]]: ...
