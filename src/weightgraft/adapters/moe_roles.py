"""The roles inside a mixture-of-experts block: router, experts, shared expert and its gate.

A MoE block is position-wise (each token is routed on its own), so it stands where a dense MLP
would, and the `mlp` group on its layer is the whole block. Inside it:

- the experts are the module whose parameters carry a leading experts axis (3-D tensors);
- the router is the projection fed by the block's input whose output has one column per expert;
- a shared expert is a submodule of projections fed by the block's input, run on every token;
- its gate is a projection fed by the block's input with a single output column;
- a norm whose output is the block's output is `post_mlp_norm`.

Modules called on tokens laid flat (`[batch * seq, ...]`, as transformers' MoE blocks call their
router and experts) get the call form "flat", so that the engine indexes that axis directly;
experts that see every token once per expert (`[experts * tokens, ...]`, Llama 4) "per_expert".
"""

from __future__ import annotations

import torch
from torch import nn

from weightgraft.adapters.probe import Seen
from weightgraft.adapters.role_types import BlockRoles, Refusal, is_linear_like, is_norm_like


def expert_modules(modules: dict[str, nn.Module], owners: list[str]) -> list[str]:
    """Modules among `owners` whose own parameters have a leading experts axis."""
    return [p for p in owners if any(t.dim() == 3 for t in modules[p].parameters(recurse=False))]


def moe_roles(
    roles: BlockRoles, modules: dict[str, nn.Module], owners: list[str], seen: dict[str, Seen], tokens: int
) -> None:
    """Fill `roles` for the MoE block `roles.mlp` whose parameter-holding modules are `owners`."""
    experts = expert_modules(modules, owners)
    if len(experts) != 1:
        raise Refusal(f"MoE block with expert modules {experts}: not exactly one set of experts")
    count = next(t.shape[0] for t in modules[experts[0]].parameters(recurse=False) if t.dim() == 3)
    feed = seen[roles.mlp].input
    found = {"experts": experts[0]}
    routers = [p for p in owners if _is_router(modules[p], seen[p], feed, count)]
    for path in owners:
        if path == experts[0] or any(path.startswith(r + ".") for r in routers):
            continue  # the router's own statistics (a score-correction bias) belong to the router
        role, path = _role(path, roles.mlp, modules, seen, routers)
        if found.get(role, path) != path:
            raise Refusal(f"MoE modules {found[role]!r} and {path!r} both act as {role}")
        found[role] = path
    if "router" not in found:
        raise Refusal(f"MoE block {roles.mlp!r} has no router (a projection with one output per expert)")
    for role, path in found.items():
        roles.per_layer[role] = path
        if role == "experts" and _per_expert(seen[path], tokens, count):
            roles.call_forms[path] = "per_expert"
        elif _flat(seen[path], tokens):
            roles.call_forms[path] = "flat"


def _role(path: str, block: str, modules: dict, seen: dict[str, Seen], routers: list[str]) -> tuple[str, str]:
    """(role, the path that takes it) of one parameter-holding module of the MoE block."""
    top = _top_child(path, block)
    if top == path and is_norm_like(modules[path]) and _fed_by(seen[block].output, seen[path].output):
        return "post_mlp_norm", path  # a norm of the block's output, inside the block (A.X-K1)
    if not _fed_by(seen[top].input, seen[block].input):
        raise Refusal(f"MoE module {top!r} is not fed by the block's input (experts inside experts?)")
    width = seen[path].output.shape[-1] if seen[path].output is not None else None
    if path in routers:
        return "router", path  # maybe inside a routing module of its own: its logits decide the choice
    if is_linear_like(modules[path]) and width == 1 and top == path:
        return "shared_expert_gate", path
    if top != path:  # a submodule of projections: a shared expert
        return "shared_expert", top
    raise Refusal(f"MoE module {path!r} is neither router, experts, shared expert nor its gate")


def _is_router(module: nn.Module, seen: Seen, feed: torch.Tensor, count: int) -> bool:
    """A projection of the block's input with one output per expert."""
    width = seen.output.shape[-1] if seen.output is not None else None
    return is_linear_like(module) and width == count and _fed_by(seen.input, feed)


def _top_child(path: str, block: str) -> str:
    """The block's direct child that holds `path`."""
    rest = path[len(block) + 1 :]
    return f"{block}.{rest.split('.', 1)[0]}"


def _fed_by(tensor: torch.Tensor | None, feed: torch.Tensor) -> bool:
    """Whether `tensor` is the block's input, maybe laid flat."""
    return tensor is not None and tensor.numel() == feed.numel() and torch.equal(tensor.reshape(-1), feed.reshape(-1))


def _per_expert(seen: Seen, tokens: int, count: int) -> bool:
    """The experts see every token once per expert ([experts * tokens, ...], Llama 4)."""
    return count > 1 and all(
        t is not None and t.dim() == 2 and t.shape[0] == count * tokens for t in (seen.input, seen.output)
    )


def _flat(seen: Seen, tokens: int) -> bool:
    """The module sees or returns tokens laid flat: [tokens, ...] with no batch axis (batch 1)."""
    return any(t is not None and t.dim() == 2 and t.shape[0] == tokens for t in (seen.input, seen.output))
