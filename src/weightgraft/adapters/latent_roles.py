"""Attention whose projections read other projections' outputs: low-rank q and multi-latent
attention (DeepSeek-V2 and its kin), decided by data flow and behaviour on the probe.

A projection fed by a norm of another projection's output (or of some of its columns) is the end
of a chain. Found by data flow: each such norm and the projection, or the columns of it, it reads.
Then by behaviour, as for plain attention (`block_roles`):

- a chain whose norm reads a projection's whole output is one component, the role its last
  projection plays (q for a low-rank q: q_a_proj, q_a_layernorm, q_b_proj);
- a norm that reads some columns of a projection reads the shared key-value latent: those columns
  and the norm are `kv_latent`; the projection's other columns must act as k (the shared rotary
  key), and the projection reading the norm is cut into k and v columns, each head [k | v] or the
  parts one after another; k's width per head is q's less the rotary key's, so each candidate
  layout is fixed by the widths the probe saw, and exactly one must pass;
- k is then the rotary key's columns and the per-head k columns together, v the v columns.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from weightgraft.adapters.layouts import Layout, latent_kv_layouts
from weightgraft.adapters.probe import PROBE_TOKENS, seq_axis
from weightgraft.adapters.role_types import BlockRoles, Refusal


def _same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """The same values in the same order (a view may add a unit axis: [b, s, r] and [b, 1, s, r])."""
    return a is not None and b is not None and a.numel() == b.numel() and torch.equal(a.reshape(-1), b.reshape(-1))


def _columns_read(source: torch.Tensor, read: torch.Tensor) -> torch.Tensor | None:
    """The contiguous last-axis columns of `source` that `read` equals; None when none do."""
    width, total = read.shape[-1], source.shape[-1]
    for start in range(total - width + 1):
        if _same(source[..., start : start + width], read):
            return torch.arange(start, start + width)
    return None


class LatentAttention:
    """Roles of an attention with chained projections; `inference` is the block's `BlockInference`
    (its probe, its baseline and its role tests)."""

    def __init__(self, inference, roles: BlockRoles, linears: list[str], norms: list[str]):
        self.inf, self.roles, self.base = inference, roles, inference.base
        fed = self.base[roles.attn].input
        self.o = inference.o
        self.firsts = [p for p in linears if p != self.o and _same(self.base[p].input, fed)]
        self.seconds = [p for p in linears if p != self.o and p not in self.firsts]
        self.norms = norms

    def assign(self) -> None:
        links = [self._link(second) for second in self.seconds]
        loose = sorted(set(self.norms) - {norm for _, _, norm, _ in links})
        if loose:
            raise Refusal(f"attention norms {loose} feed no projection of a low-rank or latent attention")
        lowrank = [link for link in links if link[1] is None]
        latent = [link for link in links if link[1] is not None]
        chained_firsts = {first for first, _, _, _ in links}
        for first in [p for p in self.firsts if p not in chained_firsts]:
            self._assign(self._role(first), first)
        for first, _, norm, second in lowrank:
            self._assign(self._role(second), [first, norm, second])
        if len(latent) > 1:
            raise Refusal(f"{len(latent)} key-value latents in one attention: not multi-latent attention")
        for first, cols, norm, second in latent:
            self._latent(first, cols, norm, second)
        found = {c for c in ("q", "k", "v") if c in self.roles.per_layer}
        if found != {"q", "k", "v"}:
            raise Refusal(f"the attention's projections act as {sorted(found)}, not q, k and v")
        for path in [p for p in self.firsts + self.seconds + self.norms]:
            axis = seq_axis(self.base[path].input)
            if axis is None:
                raise Refusal(f"attention module {path!r} has no token axis in its input")
            if axis != 1:
                self.roles.seq_dims[path] = axis

    def _link(self, second: str) -> tuple[str, torch.Tensor | None, str, str]:
        """(first projection, its columns the norm reads or None for all, norm, second projection)."""
        reads = self.base[second].input
        norm = next((n for n in self.norms if _same(self.base[n].output, reads)), None)
        if norm is None:
            raise Refusal(
                f"attention projection {second!r} reads neither the attention's input nor a norm of another "
                "projection's output"
            )
        for first in self.firsts:
            out, seen = self.base[first].output, self.base[norm].input
            if _same(out, seen):
                return first, None, norm, second
            cols = _columns_read(out, seen)
            if cols is not None:
                return first, cols, norm, second
        raise Refusal(f"attention norm {norm!r} reads no projection of the attention's input")

    def _role(self, path: str) -> str:
        width = self.base[path].output.shape[-1]
        role = self.inf._part_role(path, torch.arange(width))
        if role is None:
            raise Refusal(f"attention projection {path!r} acts as none of q, k and v")
        return role

    def _assign(self, role: str, entry) -> None:
        if role in self.roles.per_layer:
            raise Refusal(f"two projections ({self.roles.per_layer[role]!r}, {entry!r}) both act as {role}")
        self.roles.per_layer[role] = entry

    def _latent(self, first: str, cols: torch.Tensor, norm: str, second: str) -> None:
        width = self.base[first].output.shape[-1]
        rest = torch.tensor([c for c in range(width) if c not in set(cols.tolist())], dtype=torch.long)
        if not len(rest) or self.inf._part_role(first, rest) != "k":
            raise Refusal(f"the columns of {first!r} outside the latent {norm!r} reads do not act as a shared key")
        if "q" not in self.roles.per_layer:
            raise Refusal("multi-latent attention without a q projection")
        q_entry = self.roles.per_layer["q"]
        q_path = q_entry[-1] if isinstance(q_entry, list) else q_entry
        layout = self.inf._one_layout(second, self._kv_candidates(second, q_path, len(rest)), "attention")
        self.roles.splits[first] = {"kv_latent": cols, "k": rest}
        self.roles.splits[second] = layout
        self._assign("k", [(first, "k"), (second, "k")])
        self._assign("v", (second, "v"))
        self._assign("kv_latent", [(first, "kv_latent"), norm])

    def _kv_candidates(self, second: str, q_path: str, rope: int) -> list[Layout]:
        width, q_width = self.base[second].output.shape[-1], self.base[q_path].output.shape[-1]
        out: list[Layout] = []
        for heads in sorted({h for h, _, _ in self.inf.heads}):
            if width % heads or q_width % heads:
                continue
            k_width = q_width // heads - rope
            out += latent_kv_layouts(heads, k_width, width // heads - k_width)
        return out


@torch.no_grad()
def history_modules(model: nn.Module, block: nn.Module, paths: list[str]) -> list[str]:
    """Block modules that, on a step after a cached prefix, see more positions than the step has:
    they run over the whole history (multi-latent attention's kv_b_proj expands the cached latent)."""
    lengths: dict[str, int] = {}
    handles = []

    def hook(path: str):
        def record(module, args, kwargs, output):
            x = args[0] if args and isinstance(args[0], torch.Tensor) else None
            if x is not None:
                lengths.setdefault(path, int(PROBE_TOKENS in tuple(x.shape)))

        return record

    modules = dict(block.named_modules())
    device = next(model.parameters()).device
    ids = torch.arange(1, PROBE_TOKENS, device=device)[None]  # the step after them sees PROBE_TOKENS
    try:
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True)
        name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        cache = getattr(out, name, None)
        if cache is None:
            return []
        handles = [modules[p].register_forward_hook(hook(p), with_kwargs=True) for p in paths]
        step = torch.tensor([[7]], device=device)
        mask = torch.ones(1, PROBE_TOKENS, dtype=torch.long, device=device)
        model(input_ids=step, attention_mask=mask, **{name: cache})
    finally:
        for handle in handles:
            handle.remove()
    return [p for p in paths if lengths.get(p)]
