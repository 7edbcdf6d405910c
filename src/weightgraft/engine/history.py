"""Modules that run over every cached position at each step, and the passes that graft them.

Multi-latent attention caches a latent per position and expands it into keys and values
(`kv_b_proj`) at every step, over the whole history. A graft of k or v at position j means
position j's key and value computed with the donor's weights, for every later query: one pass
over the whole row does that (the module sees every position once), a pass over a cached prefix
would not (the module would see the history, whose grafts the pass does not know). So a call that
grafts such a module runs without prefix sharing, and generation refuses it.
"""

from __future__ import annotations

from weightgraft.adapters.base import Adapter
from weightgraft.engine.graft_masks import GraftMasks
from weightgraft.errors import UserError


def history_keys(adapter: Adapter, targets: dict[str, list]) -> set[int]:
    """Indices of the keys served by a module the adapter says reads the history."""
    prefix = adapter.layers + "."
    found = set()
    for path, served in targets.items():
        local = path[len(prefix) :].split(".", 1)[-1] if path.startswith(prefix) else None
        if local in adapter.history_modules:
            found |= {k for k, _ in served}
    return found


def grafts_history(grafted: GraftMasks, history: set[int], num_keys: int, num_donors: int) -> bool:
    """Whether this call grafts a history-reading module's key anywhere (whole or some units)."""
    if not history:
        return False
    whole = any(grafted.classes[d * num_keys + k] >= 0 for d in range(num_donors) for k in history)
    base = num_donors * num_keys
    return whole or any(grafted.classes[base + i] >= 0 for i, (_, k, _) in enumerate(grafted.partials) if k in history)


def refuse_history_generation(components: list[str]) -> None:
    raise UserError(
        f"generate cannot graft {components}: multi-latent attention recomputes every cached position's key and "
        "value at each step, so a prompt position's graft would not last; graft them with logits or last_logits"
    )
