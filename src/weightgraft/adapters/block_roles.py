"""Which module of a decoder block plays which canonical role, decided by behaviour on a probe.

Names mislead (a module called `gate` is a MoE router in many models; a `query_key_value` has
three layouts within one model type), so every role here is decided by what a nudge does:

- the attention is the child whose output at one position moves when another position's input
  moves; the MLP is the position-wise child with projections;
- o is the attention projection whose input already mixes positions;
- q, k and v are the projections before the mixing: a change to q at one position moves only
  that position's attention output; a change to k or v moves later positions too, and the
  output follows v exactly linearly, k not;
- in the MLP, down is the projection not fed by the MLP's input; the MLP's output follows up
  exactly linearly through the elementwise product, gate not;
- a fused projection gets every candidate layout tried (`layouts.py`): exactly one must pass;
- norms are placed by data flow: what feeds the attention or MLP, what reads their outputs.
"""

from __future__ import annotations

import torch

from weightgraft.adapters.joined_roles import apply_joins, find_joins, head_of
from weightgraft.adapters.latent_roles import LatentAttention
from weightgraft.adapters.layouts import Layout, attention_layouts, gate_up_layouts
from weightgraft.adapters.moe_roles import expert_modules, moe_roles
from weightgraft.adapters.probe import BlockProbe, changed_positions, is_linear_in, nudge, seq_axis
from weightgraft.adapters.role_types import BlockRoles, Refusal, direct_parameters, is_linear_like, is_norm_like


def _under(path: str, parent: str) -> bool:
    return path.startswith(parent + ".")


class BlockInference:
    """Decides the roles in `probe`'s block; `heads` are (query heads, key-value heads, head
    width) combinations a fused projection may be cut by."""

    def __init__(self, probe: BlockProbe, heads: list[tuple[int, int, int]]):
        self.probe = probe
        self.heads = heads
        self.modules = dict(probe.block.named_modules())
        self.base = probe.baseline
        self.middle = probe.tokens // 2
        self.virtual_mlp: list[str] = []
        self.shared_beside = ""  # a dense MLP beside a MoE block, read from the same input (GraniteMoeShared)
        self._memo: dict[tuple, str | None] = {}
        self.chained: list[str] = []  # attention projections fed by other projections (latent_roles)

    def roles(self) -> BlockRoles:
        owners = [p for p, m in self.modules.items() if p and direct_parameters(m)]
        not_run = [p for p in owners if p not in self.base]
        if not_run:
            raise Refusal(f"modules {not_run[:4]} hold parameters but do not run in a forward pass")
        looped = [p for p in owners if self.base[p].calls > 1]
        if looped:
            raise Refusal(f"modules {looped[:4]} run more than once per block (looped or shared weights)")
        attn, mlp = self._attention_and_mlp()
        roles = BlockRoles(attn, mlp)
        in_mlp = [p for p in owners if _under(p, mlp)] if mlp else list(self.virtual_mlp)
        self._attention_roles(roles, [p for p in owners if _under(p, attn)])
        self._mlp_roles(roles, in_mlp)
        if self.shared_beside:
            self._shared_beside(roles)
            in_mlp += [p for p in owners if _under(p, self.shared_beside)]
        self._block_norms(roles, [p for p in owners if not _under(p, attn) and p not in in_mlp])
        self._flat_forms(roles)
        return roles

    def _flat_forms(self, roles: BlockRoles) -> None:
        """Modules the block calls on its tokens laid flat ([batch * seq, ...]: OPT reshapes before
        its MLP and norm) get the call form "flat", so that the engine indexes that axis."""
        refs = [r for entry in roles.per_layer.values() for r in (entry if isinstance(entry, list) else [entry])]
        for ref in refs:  # a chain (a list) flattened to its modules
            path = ref[0] if isinstance(ref, tuple) else ref
            seen = self.base[path]
            if path in roles.call_forms or seen.input is None or seen.output is None:
                continue
            if seq_axis(seen.input) == 0 and seq_axis(seen.output) == 0:
                roles.call_forms[path] = "flat"
                roles.seq_dims.pop(path, None)

    # --- attention and MLP ----------------------------------------------------------------
    def _attention_and_mlp(self) -> tuple[str, str]:
        children = [n for n, m in self.probe.block.named_children() if any(True for _ in m.parameters())]
        mixing, wise = [], []
        for name in children:
            if is_norm_like(self.modules[name]):
                continue
            (mixing if self._mixes_positions(name) else wise).append(name)
        if len(mixing) != 1:
            what = "no submodule mixes positions" if not mixing else f"submodules {mixing} all mix positions"
            raise Refusal(f"{what}: not one attention per block (recurrent, convolutional or hybrid block?)")
        if len(wise) > 1 and all(is_linear_like(self.modules[n]) for n in wise):
            self.virtual_mlp = wise  # the block holds the MLP's projections itself (OPT, BioGPT)
            return mixing[0], ""
        if len(wise) == 2:
            wise = self._moe_and_shared(wise)
        if len(wise) != 1:
            raise Refusal(f"position-wise submodules {wise}: not exactly one MLP per block")
        loose = [f"{p}.{n}" for p in (mixing[0], wise[0]) for n in direct_parameters(self.modules[p])]
        if loose:
            raise Refusal(f"parameters {loose} sit on the attention or MLP itself, outside any projection")
        return mixing[0], wise[0]

    def _moe_and_shared(self, wise: list[str]) -> list[str]:
        """Of two position-wise children, a MoE block and a dense MLP of projections read from the
        same input (a shared expert beside the block): the MoE block, the other kept aside."""
        owned = {n: [p for p, m in self.modules.items() if _under(p, n) and direct_parameters(m)] for n in wise}
        moe = [n for n in wise if expert_modules(self.modules, owned[n])]
        if len(moe) != 1:
            return wise
        shared = next(n for n in wise if n != moe[0])
        dense = owned[shared] and all(is_linear_like(self.modules[p]) for p in owned[shared])
        if not dense or direct_parameters(self.modules[shared]):
            return wise
        if not torch.equal(self.base[shared].input, self.base[moe[0]].input):
            return wise
        self.shared_beside = shared
        return moe

    def _shared_beside(self, roles: BlockRoles) -> None:
        """The dense MLP beside the MoE block is its shared expert; the `mlp` group is both, so
        the adapter names no single MLP module (the group is read off the component names)."""
        if "shared_expert" in roles.per_layer:
            raise Refusal(
                f"a shared expert inside the MoE block ({roles.per_layer['shared_expert']!r}) and one beside it "
                f"({self.shared_beside!r})"
            )
        roles.per_layer["shared_expert"] = self.shared_beside
        roles.mlp = ""

    def _mixes_positions(self, path: str) -> bool:
        seen = self.base.get(path)
        if seen is None or seen.input is None or seen.output is None:
            raise Refusal(f"submodule {path!r} does not map a tensor to a tensor")
        axis_in, axis_out = seq_axis(seen.input), seq_axis(seen.output)
        if axis_in is None or axis_out is None:
            raise Refusal(f"submodule {path!r} has no token axis in its input or output")
        after = self.probe.run(inputs={path: lambda t: nudge(t, 0, axis_in)})[path].output
        return bool(changed_positions(seen.output, after, axis_out) - {0})

    # --- inside the attention -------------------------------------------------------------
    def _attention_roles(self, roles: BlockRoles, owners: list[str]) -> None:
        linears = [p for p in owners if is_linear_like(self.modules[p])]
        norms = [p for p in owners if is_norm_like(self.modules[p])]
        strange = sorted(set(owners) - set(linears) - set(norms))
        if strange:
            raise Refusal(f"attention parameters in {strange} are neither a projection nor a norm")
        axis = seq_axis(self.base[roles.attn].input)
        moved = self.probe.run(inputs={roles.attn: lambda t: nudge(t, 0, axis)})
        post = [p for p in linears if changed_positions(self.base[p].input, moved[p].input, self._axis_in(p)) - {0}]
        after_mixing = [
            n for n in norms if changed_positions(self.base[n].input, moved[n].input, self._axis_in(n)) - {0}
        ]
        if len(post) != 1:
            raise Refusal(f"attention projections after the mixing: {post}, not exactly one output projection")
        self.o = self.o_in = roles.per_layer["o"] = post[0]
        if after_mixing:  # a sub-norm that o reads (BitNet's attn_sub_norm) joins o as a chain
            joins = find_joins(self.base, after_mixing, post)
            if joins is None:
                raise Refusal(f"attention norms {after_mixing} act after the mixing, where no canonical norm sits")
            apply_joins(roles, joins)
            self.o_in = head_of(roles.per_layer["o"])
            norms = [n for n in norms if n not in after_mixing]
        parts: dict[str, tuple[str, torch.Tensor]] = {}
        fed = self.base[roles.attn].input
        chained = [p for p in linears if p not in post and not torch.equal(self.base[p].input, fed)]
        if chained:  # low-rank or multi-latent attention: chains of projections and norms
            self.chained = chained
            LatentAttention(self, roles, linears, norms).assign()
            return
        for path in [p for p in linears if p not in post]:
            layout = self._one_layout(path, self._attention_candidates(path), "attention")
            fused = len(layout) > 1 or next(iter(layout)) not in ("q", "k", "v")
            for part, cols in layout.items():
                if part in parts:
                    raise Refusal(f"two projections ({parts[part][0]}, {path}) both act as {part}")
                parts[part] = (path, cols)
                roles.per_layer[part] = (path, part) if fused else path
            if fused:
                roles.splits[path] = layout
        if set(parts) != {"q", "k", "v"}:
            raise Refusal(f"the attention's projections act as {sorted(parts)}, not q, k and v")
        self._qk_norms(roles, norms, parts)

    def _axis_in(self, path: str) -> int:
        axis = seq_axis(self.base[path].input)
        if axis is None:
            raise Refusal(f"projection {path!r} has no token axis in its input")
        return axis

    def _attention_candidates(self, path: str) -> list[Layout]:
        width = self.base[path].output.shape[-1]
        out: list[Layout] = []
        for heads, kv_heads, head_dim in self.heads:
            out += attention_layouts(width, heads, kv_heads, head_dim)
        return out

    def _one_layout(self, path: str, candidates: list[Layout], where: str) -> Layout:
        passing = []
        for layout in candidates:
            if all(self._part_role(path, cols) == part for part, cols in layout.items()):
                key = sorted((p, tuple(c.tolist())) for p, c in layout.items())
                if key not in [k for k, _ in passing]:
                    passing.append((key, layout))
        if len(passing) != 1:
            shape = tuple(self.base[path].output.shape)
            count = "no" if not passing else f"{len(passing)}"
            raise Refusal(f"{where} projection {path!r} (output {shape}): {count} candidate layouts pass the probe")
        return passing[0][1]

    def _part_role(self, path: str, cols: torch.Tensor) -> str | None:
        """q, k or v (attention) or gate or up (MLP) for some output columns of a projection."""
        key = (path, tuple(cols.tolist()))
        if key not in self._memo:
            in_mlp = hasattr(self, "down") and (_under(path, self.mlp_path) or path in self.virtual_mlp)
            self._memo[key] = self._mlp_part(path, cols) if in_mlp else self._attention_part(path, cols)
        return self._memo[key]

    def _responses(self, path: str, cols: torch.Tensor, reader: str) -> tuple[torch.Tensor, ...]:
        axis = seq_axis(self.base[path].output)
        if axis is None:
            raise Refusal(f"projection {path!r} has no token axis in its output")
        runs = [
            self.probe.run(outputs={path: lambda t, k=k: nudge(t, self.middle, axis, cols, k)})[reader].input
            for k in (1.0, 2.0)
        ]
        return self.base[reader].input, *runs

    def _attention_part(self, path: str, cols: torch.Tensor) -> str | None:
        base, once, twice = self._responses(path, cols, self.o_in)
        rows = changed_positions(base, once, self._axis_in(self.o_in))
        if rows == {self.middle}:
            return "q"
        if not rows or min(rows) != self.middle or len(rows) == 1:
            return None
        linear = is_linear_in((base, once, twice))
        return None if linear is None else ("v" if linear else "k")

    def _qk_norms(self, roles: BlockRoles, norms: list[str], parts: dict) -> None:
        reached: dict[str, set[str]] = {n: set() for n in norms}
        for part in ("q", "k"):
            path, cols = parts[part]
            axis = seq_axis(self.base[path].output)
            seen = self.probe.run(outputs={path: lambda t, a=axis, c=cols: nudge(t, self.middle, a, c)})
            for norm in norms:
                if not torch.equal(seen[norm].input, self.base[norm].input):
                    reached[norm].add(part)
        for norm, sources in reached.items():
            if len(sources) != 1:
                raise Refusal(f"attention norm {norm!r} reads {sorted(sources) or 'neither q nor k'}")
            name = f"{sources.pop()}_norm"
            if name in roles.per_layer:
                raise Refusal(f"two attention norms act as {name}")
            roles.per_layer[name] = norm
            axis = seq_axis(self.base[norm].input)
            if axis is None:
                raise Refusal(f"attention norm {norm!r} has no token axis in its input")
            if axis != 1:
                roles.seq_dims[norm] = axis

    # --- inside the MLP -------------------------------------------------------------------
    def _mlp_roles(self, roles: BlockRoles, owners: list[str]) -> None:
        if roles.mlp and expert_modules(self.modules, owners):
            moe_roles(roles, self.modules, owners, self.base, self.probe.tokens)
            self.mlp_in, self.mlp_out = self.base[roles.mlp].input, self.base[roles.mlp].output
            return
        strange = sorted(p for p in owners if not is_linear_like(self.modules[p]))
        owners = [p for p in owners if p not in strange]
        joins = find_joins(self.base, strange, owners) if strange else {}
        if joins is None:
            kinds = (
                "activation parameters" if any(p.rsplit(".", 1)[-1].startswith("act") for p in strange) else "a norm"
            )
            raise Refusal(
                f"MLP parameters in {strange} are not projections ({kinds}, which no canonical component takes)"
            )
        self._mlp_projections(roles, owners, joins)
        apply_joins(roles, joins)

    def _mlp_projections(self, roles: BlockRoles, owners: list[str], joins: dict) -> None:
        """down, up and gate among the MLP's projections (`joins`: modules on their paths)."""
        first = min(owners, key=lambda p: self.base[p].order)
        feed = self.base[roles.mlp].input if roles.mlp else self.base[first].input
        inputs = [p for p in owners if torch.equal(self.base[p].input, feed)]
        downs = [p for p in owners if p not in inputs]
        if len(downs) != 1 or not inputs:
            raise Refusal(f"MLP projections {owners}: not one down projection fed by the rest")
        self.mlp_path, self.down = roles.mlp, downs[0]
        self.down_in = joins[self.down][0][0] if self.down in joins and joins[self.down][0] else self.down
        self.mlp_in, self.mlp_out = feed, (self.base[roles.mlp].output if roles.mlp else self.base[self.down].output)
        roles.per_layer["down"] = self.down
        inner = self.base[self.down].input.shape[-1]
        found: set[str] = set()
        for path in inputs:
            width = self.base[path].output.shape[-1]
            if len(inputs) == 1 and width == inner:  # no gate: up feeds the activation alone
                roles.per_layer["up"] = path
                return
            candidates = gate_up_layouts(width, inner) + ([{"gate": torch.arange(width)}] if width == inner else [])
            layout = self._one_layout(path, candidates, "MLP")
            if found & set(layout):
                raise Refusal(f"two MLP projections act as {sorted(found & set(layout))}")
            found |= set(layout)
            if len(layout) > 1:
                roles.splits[path] = layout
                roles.per_layer.update({part: (path, part) for part in layout})
            else:
                roles.per_layer[next(iter(layout))] = path
        if "up" not in found:
            raise Refusal("no MLP projection acts as up (the MLP's output is not linear in any of them)")

    def _mlp_part(self, path: str, cols: torch.Tensor) -> str | None:
        linear = is_linear_in(self._responses(path, cols, self.down_in))
        return None if linear is None else ("up" if linear else "gate")

    # --- norms of the block ---------------------------------------------------------------
    def _block_norms(self, roles: BlockRoles, owners: list[str]) -> None:
        strange = sorted(p for p in owners if not is_norm_like(self.modules[p]))
        if strange:
            raise Refusal(f"block parameters in {strange} belong to neither attention, MLP nor a norm")
        attn = self.base[roles.attn]
        for norm in owners:
            seen = self.base[norm]
            if torch.equal(seen.output, attn.input):
                name = "ln1"
            elif torch.equal(seen.output, self.mlp_in):
                name = "ln2"
            elif torch.equal(seen.input, attn.output):
                name = "post_attn_norm"
            elif torch.equal(seen.input, self.mlp_out):
                name = "post_mlp_norm"
            else:
                raise Refusal(
                    f"norm {norm!r} neither feeds nor reads the attention or the MLP (a norm of the residual "
                    "stream after the add, post-LN?), which no canonical component takes"
                )
            if name in roles.per_layer:
                raise Refusal(f"norms {roles.per_layer[name]!r} and {norm!r} both act as {name}")
            roles.per_layer[name] = norm
