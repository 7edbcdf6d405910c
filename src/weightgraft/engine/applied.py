"""`Grafter.applied`: the graft installed on the recipient itself, so that the user's own forward
pass, forward hooks, `generate` or an nnsight trace of the recipient run grafted.

Inside the block, a forward of the recipient on the call's `[batch, seq]` shape takes the grafts'
splices (planned once per `logits_to_keep` it is called with); a forward on any other shape (the
tokens `generate` adds after the prompt) gets nothing grafted, as `Grafter.generate(...,
generated="none")` does. On exit, exception or not, the hooks are removed and the recipient's
training mode restored; its weights are never written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from weightgraft.engine.activations import GraftedCall, grafted_call
from weightgraft.engine.grafter_protocol import GraftPasses


@contextmanager
def applied(grafter: GraftPasses, inputs, grafts, row_grafts, attention_mask) -> Iterator[GraftedCall]:
    """The grafts on the recipient for forwards over `inputs`' shape (see the module's
    docstring); yields the call's `input_ids`, `attention_mask` and `position_ids` to pass."""
    grad = torch.is_grad_enabled()
    with grafted_call(grafter, inputs, grafts, row_grafts, attention_mask) as call:
        shape = tuple(call.input_ids.shape)
        planned: dict[int, dict] = {}

        def choose(_module, args, kwargs):
            tokens = kwargs.get("input_ids")
            if tokens is None:
                tokens = args[0] if args else kwargs.get("inputs_embeds")
            keep = kwargs.get("logits_to_keep", 0)
            if tokens is None or tuple(tokens.shape[:2]) != shape or not isinstance(keep, int):
                call.hooks.current = {}
                return
            keep = min(keep, shape[1])
            if keep not in planned:
                planned[keep] = grafter._splices(call.grafted, call.hooks.paths, keep=keep)
            call.hooks.current = planned[keep]

        handle = grafter.recipient.register_forward_pre_hook(choose, with_kwargs=True)
        try:
            with torch.set_grad_enabled(grad):
                yield call
        finally:
            handle.remove()
