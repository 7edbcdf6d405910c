"""Reuse an earlier call's decoder-layer outputs where a new call cannot differ from it.

An explorer's click changes one cell: a graft at layer l leaves layers 0..l-1 computing exactly
what the previous call computed (the same tokens, the same grafts up to there, the same kernels
on the same shapes). The memo keeps the layer outputs of the last few calls, each layer's under a
digest of everything its output depends on: the tokens and mask, every graft up to and including
that layer (with the heads or neurons it narrows to), and the thread count. A new call returns
the kept outputs of the longest run of leading layers whose digests it shares and computes the
rest, so its logits equal a full pass's bit for bit.

Opt-in (`Grafter.remember_layers`): the memo assumes the models' weights do not change between
calls, and it serves single-row passes only (not generation, not batches).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

import torch
from torch import nn

from weightgraft.engine.graft_masks import GraftMasks
from weightgraft.engine.layer_sharing import wrapped_forwards


def layer_digests(
    ids: torch.Tensor,
    mask: torch.Tensor,
    grafted: GraftMasks,
    keys_before: Sequence[int],
    keys_of_layer: Sequence[Sequence[int]],
) -> list[bytes]:
    """Digest l covers what layer l's output depends on; each extends the one before it.
    `keys_of_layer` index `grafted.masks` (partial masks included) per layer."""
    masks = grafted.masks.detach().cpu().contiguous().numpy()  # once: one copy off the device
    running = hashlib.sha256()
    for part in (
        ids.detach().cpu().contiguous().numpy(),
        mask.detach().cpu().contiguous().numpy(),
        masks[list(keys_before)],
    ):
        running.update(repr(tuple(part.shape)).encode())
        running.update(part.tobytes())
    running.update(f"threads={torch.get_num_threads()}".encode())
    base = masks.shape[0] - len(grafted.partials)
    out = []
    for keys in keys_of_layer:
        running.update(repr(sorted(keys)).encode())
        for k in sorted(keys):
            running.update(masks[k].tobytes())
            if k >= base:  # a partial mask: which heads or neurons it grafts matters too
                running.update(repr(sorted(grafted.partials[k - base][2])).encode())
        out.append(running.copy().digest())
    return out


def remembered(
    memo: LayerMemo | None,
    ids: torch.Tensor,
    mask: torch.Tensor,
    grafted: GraftMasks,
    keys_before: Sequence[int],
    keys_of_layer: Sequence[Sequence[int]],
) -> AbstractContextManager:
    """The memo installed for one pass: single rows only (an explorer's clicks), since a batch's
    layer outputs would take memory in proportion to it; nothing when the Grafter keeps no memo."""
    if memo is None or ids.shape[0] != 1:
        return nullcontext()
    return memo.installed(layer_digests(ids, mask, grafted, keys_before, keys_of_layer))


def _copy(value):
    """A tensor (or a tuple or list of them) copied, so that no caller can change what is kept."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_copy(v) for v in value)
    return value


class LayerMemo:
    """The decoder-layer outputs of the last `calls` passes, by their layers' digests."""

    def __init__(self, layers: nn.ModuleList, calls: int = 8):
        self.layers = list(layers)
        self.calls = calls
        self._kept: OrderedDict[tuple[bytes, ...], list] = OrderedDict()
        self.reused_layers = 0  # for tests and benchmarks: layers served from the memo so far

    def _best(self, digests: list[bytes]) -> tuple[int, list | None]:
        """How many leading layers a kept pass shares with `digests`, and its outputs."""
        best, outputs = 0, None
        for kept, kept_outputs in self._kept.items():
            shared = 0
            while shared < len(digests) and kept[shared] == digests[shared]:
                shared += 1
            if shared > best:
                best, outputs = shared, kept_outputs
        return best, outputs

    @contextmanager
    def installed(self, digests: list[bytes]) -> Iterator[None]:
        """Within: layers 0..n-1 return the kept outputs of the pass that shares the most leading
        layers (n of them), the others compute; the pass's outputs are kept afterwards."""
        shared, kept_outputs = self._best(digests)
        outputs: list = [None] * len(self.layers)

        def remembering(index: int, forward):  # outside layer sharing's wrappers, which stay inside
            return self._remembering(index, forward, shared, kept_outputs, outputs)

        with wrapped_forwards(self.layers, remembering):
            yield
        if all(o is not None for o in outputs):
            self._kept[tuple(digests)] = outputs
            self._kept.move_to_end(tuple(digests))
            while len(self._kept) > self.calls:
                self._kept.popitem(last=False)

    def _remembering(self, index: int, forward, shared: int, kept_outputs: list | None, outputs: list):
        def remembering_forward(*args, **kwargs):
            if index < shared:
                # Only the last shared layer's output is read (by the next layer, which computes).
                outputs[index] = kept_outputs[index]
                self.reused_layers += 1
                return _copy(kept_outputs[index])
            out = forward(*args, **kwargs)
            outputs[index] = _copy(out)
            return out

        return remembering_forward
