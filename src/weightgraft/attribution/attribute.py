"""Graft attribution: how much computing one cell (position x layer x component) with the donor's
weights moves a metric, for every cell at once.

Grafting a cell replaces the recipient module's output row at that position by the donor module's
output on the same input. With `delta = donor(x) - recipient(x)` at that row:

- `gradient`: effect ~ <d metric / d output, delta> at the recipient. One forward and one backward
  pass (plus the donor's modules on the recipient's inputs) cover every cell.
- `integrated`: every cell's output becomes `recipient + alpha * delta` (the donor's module on the
  current, already mixed input), alpha running from 0 to 1. A cell's attribution is the path
  integral of <d metric / d output, delta>, by the midpoint rule over `steps` points; the cells
  then sum to metric(donor everywhere) - metric(recipient) up to the rule's error, which
  `completeness_gap` reports.

At `grain="head"` or `grain="neuron"` the heads of q, k, v, o (or the neurons of gate, up, down)
are scored too, in `Attribution.units`: an output-column unit (q/k/v heads, gate/up neurons) by
the same product over its columns; an input-column unit (o heads, down neurons) by <g, ΔW[:, u]
x[u]> = sum over its columns of (ΔW^T g) * x, with ΔW^T g from one vector-Jacobian product of the
module's change (so a head's score is what swapping its columns of W_o does, to first order). A
component's units sum to its cell, except that o's and down's units leave out the bias's share
(the bias belongs to the whole component): `cells - units.sum(-1)` is that share.

Neither model is written to: the passes run through forward hooks (removed afterwards) and
`torch.autograd.grad` with respect to module outputs only, so no parameter's `.grad` is touched.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

import polars as pl
import torch
from torch import nn

from weightgraft.adapters.call_forms import experts_count, token_major
from weightgraft.attribution.cells import CellLayout, cell_layout, donor_source
from weightgraft.attribution.effect_hooks import EffectHooks
from weightgraft.engine.grafter import Grafter
from weightgraft.engine.inputs import last_real_index, position_ids

Metric = Literal["logprob", "prob"] | Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
PAPER_ROLES = ("FE", "M", "R", "LT", "other")
# Role names of weightgraft's datasets (`data.schema.Role`) -> the paper's.
# The components each grain splits into units.
GRAINS = {"component": (), "head": ("q", "k", "v", "o"), "neuron": ("gate", "up", "down"), "expert": ("experts",)}
_PAPER_NAME = {"first_entity": "FE", "movie_title": "M", "relation": "R", "last_token": "LT"}


class AttributionMethod(str, Enum):
    """How `attribute` scores a cell: the gradient at the recipient (`gradient`) or integrated
    along the path to the donor (`integrated`). A `str` enum: configs, requests and files hold
    the plain values, which compare equal to the members."""

    GRADIENT = "gradient"
    INTEGRATED = "integrated"

    __str__ = str.__str__  # the value, in every Python (not "AttributionMethod.GRADIENT")


@dataclass
class Attribution:
    """Effects of grafting each cell, on the metric at each row's last real token.

    `cells[b, p, l, c]`: row b, the p-th *real* token of the row (padding skipped, as a `Graft`
    counts positions), layer l, per-layer component `layer_components[c]`.
    `model_level[b, p, c]`: the model-level components (`model_components`: embed, pos_embed,
    ln_final, lm_head), which have no layer. Entries past a row's length are 0.
    """

    cells: torch.Tensor
    model_level: torch.Tensor
    layer_components: tuple[str, ...]
    model_components: tuple[str, ...]
    lengths: list[int]
    method: str
    steps: int
    metric_recipient: torch.Tensor  # [batch]
    metric_donor: torch.Tensor  # [batch]: the donor model everywhere
    metric_name: str = "logprob"
    extra: dict = field(default_factory=dict)
    # grain "head" / "neuron": component -> [batch, position, layer, unit] (see the module docstring)
    units: dict[str, torch.Tensor] = field(default_factory=dict)
    grain: str = "component"

    @property
    def total(self) -> torch.Tensor:
        """Sum of every cell's attribution, per row."""
        return self.cells.sum((1, 2, 3)) + self.model_level.sum((1, 2))

    @property
    def exact_total(self) -> torch.Tensor:
        """metric(donor everywhere) - metric(recipient), per row."""
        return self.metric_donor - self.metric_recipient

    @property
    def completeness_gap(self) -> torch.Tensor:
        """Sum of attributions minus the exact total effect, per row (integrated: the path
        integral's discretisation error; gradient: how far first order is from the whole graft)."""
        return self.total - self.exact_total

    def table(
        self,
        roles: Sequence[dict[str, Sequence[int]]] | None = None,
        tokens: Sequence[Sequence[str]] | None = None,
        row_ids: Sequence[str] | None = None,
    ):
        """Tidy polars table, one line per real cell: row, position, layer (null for model-level
        components), component, effect, and role (FE, M, R, LT, other) when `roles` gives each
        row's role positions (keyed by paper or dataset role names)."""
        batch = len(self.lengths)
        for name, given in (("roles", roles), ("tokens", tokens), ("row_ids", row_ids)):
            if given is not None and len(given) != batch:
                raise ValueError(f"{name} has {len(given)} entries for {batch} rows")
        num_layers, n_comp, n_model = self.cells.shape[2], self.cells.shape[3], self.model_level.shape[2]
        frames = []
        for b, length in enumerate(self.lengths):
            per_layer = self.cells[b, :length].reshape(-1).tolist()
            model = self.model_level[b, :length].reshape(-1).tolist()
            positions = [p for p in range(length) for _ in range(num_layers * n_comp)]
            positions += [p for p in range(length) for _ in range(n_model)]
            layers = [layer for _ in range(length) for layer in range(num_layers) for _ in range(n_comp)]
            layers += [None] * (length * n_model)
            comps = [c for _ in range(length * num_layers) for c in self.layer_components]
            comps += [c for _ in range(length) for c in self.model_components]
            columns = {
                "row": [b] * len(positions),
                "position": positions,
                "layer": layers,
                "component": comps,
                "effect": per_layer + model,
            }
            if row_ids is not None:
                columns["example_id"] = [row_ids[b]] * len(positions)
            if roles is not None:
                role_of = position_roles(roles[b], length)
                columns["role"] = [role_of[p] for p in positions]
            if tokens is not None:
                if len(tokens[b]) != length:
                    raise ValueError(f"row {b}: {len(tokens[b])} tokens given for {length} real tokens")
                columns["token"] = [tokens[b][p] for p in positions]
            frames.append(pl.DataFrame(columns, schema_overrides={"layer": pl.Int64}))
        return pl.concat(frames)


def position_roles(roles: dict[str, Sequence[int]], length: int) -> list[str]:
    """The paper's role of each of a row's real tokens; unnamed tokens are `other`."""
    out = ["other"] * length
    for name, positions in roles.items():
        role = _PAPER_NAME.get(name, name)
        if role not in PAPER_ROLES:
            raise ValueError(f"unknown role {name!r}; use {list(PAPER_ROLES)} or {list(_PAPER_NAME)}")
        for p in positions:
            if not 0 <= p < length:
                raise ValueError(f"role {name} position {p} is outside a row of {length} real tokens")
            out[p] = role
    return out


def attribute(
    grafter: Grafter,
    input_ids: torch.Tensor,
    targets: torch.Tensor | Sequence[int],
    attention_mask: torch.Tensor | None = None,
    method: Literal["gradient", "integrated"] = "gradient",
    steps: int = 16,
    metric: Metric = "logprob",
    donor: str | None = None,
    grain: Literal["component", "head", "neuron", "expert"] = "component",
    each_pass: Callable[[], AbstractContextManager] = nullcontext,
) -> Attribution:
    """Attribute metric(target | prompt) to every cell of every row.

    `targets[b]` is the token that follows row b's last real token; `metric` is `logprob`,
    `prob`, or a function (last-token logits [batch, vocab], targets [batch]) -> [batch].
    Rows may be right- or left-padded (`attention_mask`). With several donors, `donor` names the
    one whose weights a cell would compute with (call once per donor to compare them).
    `grain="head"` also scores every head of q, k, v, o, and `grain="neuron"` every neuron of
    gate, up, down, and `grain="expert"` every expert of a MoE model's experts (`Attribution.units`).
    `each_pass` wraps every pass (its forward and backward,
    with its hooks): the explorer passes its model lock, so that clicks run between the steps of
    an integrated attribution instead of waiting for all of them.

    Args:
        grafter: the `Grafter` whose recipient is attributed and whose donor a cell computes with.
        input_ids: token ids [batch, seq].
        targets: one token id per row, the token after its last real token.
        attention_mask: 0/1 [batch, seq] for padded rows (either side).
        method: "gradient" (one forward and backward) or "integrated" (`steps` points).
        steps: the midpoint rule's points for "integrated".
        metric: "logprob", "prob" or a function (logits [batch, vocab], targets [batch]) -> [batch].
        donor: with several donors, the one whose weights a cell would compute with.
        grain: "component", "head" or "neuron".
        each_pass: a context manager factory wrapped around every pass.

    Returns:
        An `Attribution`: `cells` [batch, position, layer, component], `model_level`, `units`
        (heads or neurons), `table(roles=...)`, and for "integrated" `completeness_gap`.

    Raises:
        ValueError: bad settings, a target count that is not one per row, or an unknown donor.
    """
    _check_settings(grain, method, steps)
    recipient = grafter.recipient
    source = donor_source(grafter, donor)
    device = next(recipient.parameters()).device
    ids, mask = _prepare(input_ids, attention_mask, device)
    target = torch.as_tensor(targets, device=device).long().reshape(-1)
    if target.shape[0] != ids.shape[0]:
        raise ValueError(f"{target.shape[0]} targets for {ids.shape[0]} rows; give one target token per row")
    layout = cell_layout(grafter)
    donor_modules = {t.path: source.module(t.path) for t in layout.targets}
    unit_keys = {
        k: grafter.units[comp]
        for k, (layer, comp) in enumerate(layout.keys)
        if layer is not None and comp in GRAINS[grain]
    }
    score = _metric_fn(metric)
    last = last_real_index(mask)
    was_training = recipient.training
    recipient.eval()
    try:
        with ExitStack() as stack:
            stack.enter_context(source.running())
            alphas = [0.0] if method == AttributionMethod.GRADIENT else [(k + 0.5) / steps for k in range(steps)]
            effects, units = None, None
            for alpha in alphas:
                with each_pass():
                    step_effects, value, step_units = _effects_at(
                        recipient, donor_modules, layout, ids, mask, last, target, score, alpha, units=unit_keys
                    )
                effects = step_effects if effects is None else effects + step_effects
                units = step_units if units is None else {k: units[k] + v for k, v in step_units.items()}
                if method == AttributionMethod.GRADIENT:
                    metric_recipient = value
            effects /= len(alphas)
            units = {k: v / len(alphas) for k, v in units.items()}
            with torch.no_grad(), each_pass():
                if method == AttributionMethod.INTEGRATED:
                    metric_recipient = score(_last_logits(recipient, ids, mask, last), target)
                # The donor everywhere: every module's output replaced by the donor's (alpha = 1).
                _, metric_donor, _ = _effects_at(
                    recipient, donor_modules, layout, ids, mask, last, target, score, 1.0, gradients=False
                )
    finally:
        recipient.train(was_training)
    cells, model_level, lengths = _to_cells(effects, layout, mask)
    return Attribution(
        cells=cells,
        model_level=model_level,
        layer_components=layout.layer_components,
        model_components=layout.model_components,
        lengths=lengths,
        method=method,
        steps=1 if method == AttributionMethod.GRADIENT else steps,
        metric_recipient=metric_recipient.detach().cpu(),
        metric_donor=metric_donor.detach().cpu(),
        metric_name=metric if isinstance(metric, str) else "custom",
        units=_units_to_cells(units, layout, mask, unit_keys),
        grain=grain,
    )


# --- internals --------------------------------------------------------------------------------
def _check_settings(grain: str, method: str, steps: int) -> None:
    """Refuse a grain, method or step count `attribute` has no meaning for, before any work."""
    if grain not in GRAINS:
        raise ValueError(f"grain must be one of {list(GRAINS)}, not {grain!r}")
    if method not in tuple(AttributionMethod):
        raise ValueError(f"method must be 'gradient' or 'integrated', not {method!r}")
    if method == AttributionMethod.INTEGRATED and steps < 1:
        raise ValueError(f"integrated attribution needs steps >= 1, got {steps}")


def _prepare(input_ids, attention_mask, device) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.as_tensor(input_ids, device=device).long()
    ids = ids[None] if ids.dim() == 1 else ids
    if ids.dim() != 2:
        raise ValueError(f"input_ids must be [batch, seq], got shape {tuple(ids.shape)}")
    mask = torch.ones_like(ids) if attention_mask is None else torch.as_tensor(attention_mask, device=device).long()
    mask = mask[None] if mask.dim() == 1 else mask
    if mask.shape != ids.shape:
        raise ValueError(f"attention_mask {tuple(mask.shape)} does not match input_ids {tuple(ids.shape)}")
    if bool((mask.sum(-1) == 0).any()):
        raise ValueError("a row has no real tokens (its attention_mask is all zeros)")
    return ids, mask


def _metric_fn(metric: Metric) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    if callable(metric):
        return metric
    if metric == "logprob":
        return lambda logits, target: torch.log_softmax(_wide(logits), -1).gather(1, target[:, None])[:, 0]
    if metric == "prob":
        return lambda logits, target: torch.softmax(_wide(logits), -1).gather(1, target[:, None])[:, 0]
    raise ValueError(
        f"metric must be 'logprob', 'prob' or a function, not {metric!r} "
        "(top-k rank is not differentiable: measure it on verified grafts)"
    )


def _wide(x: torch.Tensor) -> torch.Tensor:
    """At least float32 (half-precision logits lose the metric's small differences)."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def _run(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Full logits, called as the engine calls the recipient (positions count real tokens)."""
    positions = position_ids(mask)
    return model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False).logits


def _last_logits(model, ids, mask, last) -> torch.Tensor:
    return _run(model, ids, mask)[torch.arange(ids.shape[0], device=ids.device), last]


def _effects_at(
    recipient,
    donor_modules: dict[str, nn.Module],
    layout: CellLayout,
    ids,
    mask,
    last,
    target,
    score,
    alpha: float,
    gradients: bool = True,
    units: dict | None = None,
):
    """<d metric / d output, donor(x) - recipient(x)> per engine key and token, at mixing `alpha`,
    and per unit of the keys in `units` (key index -> UnitSpec).

    Returns ([num_keys, batch, seq] at least float32, or None without `gradients`; metric per row;
    {key index: [batch, seq, units]})."""
    units = units or {}
    state = EffectHooks(layout, units, alpha, gradients)
    handles = []
    try:
        for target_module in layout.targets:
            module = recipient.get_submodule(target_module.path)
            hook = state.make(target_module.path, donor_modules[target_module.path])
            handles.append(module.register_forward_hook(hook, with_kwargs=True))
        if not gradients:
            with torch.no_grad():
                logits = _run(recipient, ids, mask)
            return None, score(logits[torch.arange(ids.shape[0], device=ids.device), last], target), {}
        with torch.enable_grad():
            logits = _run(recipient, ids, mask)
            values = score(logits[torch.arange(ids.shape[0], device=ids.device), last], target)
            paths = [t.path for t in layout.targets]
            grads = torch.autograd.grad(values.sum(), [state.outputs[p] for p in paths], allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
    effects, unit_effects = _products(recipient, donor_modules, layout, ids, grads, state, units)
    return effects, values.detach(), unit_effects


def _products(
    recipient,
    donor_modules: dict[str, nn.Module],
    layout: CellLayout,
    ids: torch.Tensor,
    grads: Sequence[torch.Tensor | None],
    state: EffectHooks,
    units: dict,
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """<gradient, donor(x) - recipient(x)> of each hooked module's output, summed per engine key
    ([num_keys, batch, seq], at least float32) and per unit of the keys in `units` (through the
    module's input columns for input-side units): `_effects_at`'s products, once its pass is done."""
    batch, seq = ids.shape
    dtype = torch.promote_types(grads[0].dtype if grads and grads[0] is not None else torch.float32, torch.float32)
    effects = torch.zeros(len(layout.keys), batch, seq, dtype=dtype, device=ids.device)
    unit_effects: dict[int, torch.Tensor] = {}
    for target_module, grad in zip(layout.targets, grads):
        if grad is None:
            for key_index, _ in target_module.keys:
                if key_index in units:
                    unit_effects[key_index] = torch.zeros(batch, seq, units[key_index].count, dtype=dtype)
            continue
        product = grad.to(dtype) * state.deltas[target_module.path].to(dtype)
        if target_module.seq_dim != 1:
            product = product.movedim(target_module.seq_dim, 1)
        per_expert = None
        if target_module.form == "per_expert":  # [experts * tokens, ...] -> [tokens, experts, ...]
            count = experts_count(recipient.get_submodule(target_module.path))
            per_expert = token_major(product, count).reshape(batch * seq, count, -1).sum(-1)
            product = token_major(product, count)
        product = product.reshape(batch, seq, -1)
        through_inputs = None
        if target_module.path in state.inputs:
            through_inputs = _input_products(
                recipient, target_module.path, donor_modules[target_module.path], state.inputs[target_module.path], grad
            ).to(dtype)
        for key_index, columns in target_module.keys:
            part = product if columns is None else product[..., columns.to(product.device)]
            effects[key_index] += part.sum(-1)  # a chain: the sum over its modules
            spec = units.get(key_index)
            if spec is not None and spec.side == "expert" and per_expert is not None:  # each expert's own rows
                unit_effects[key_index] = per_expert.reshape(batch, seq, spec.count).cpu()
            elif spec is not None and spec.side == "expert":  # [experts, tokens, ...] -> [batch, seq, experts]
                each = (grad.to(dtype) * state.expert_deltas[target_module.path].to(dtype)).flatten(2).sum(-1)
                unit_effects[key_index] = each.T.reshape(batch, seq, spec.count).cpu()
            elif spec is not None:
                per_column = through_inputs if spec.side == "in" else part
                unit_effects[key_index] = per_column.reshape(batch, seq, spec.count, spec.width).sum(-1).cpu()
    return effects, unit_effects


def _input_products(recipient, path: str, donor_module: nn.Module, x: torch.Tensor, grad: torch.Tensor):
    """(ΔW^T g) * x per input column, ΔW^T g being the vector-Jacobian product of the module's
    change D(x) - R(x) (an adapter's delta alone) with the output gradient g."""
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        change = donor_module(x)
        if not getattr(donor_module, "adds_to_output", False):
            change = change - recipient.get_submodule(path).forward(x)
        (back,) = torch.autograd.grad(change, x, grad_outputs=grad.to(change.dtype))
    return back * x.detach()


def _units_to_cells(units: dict, layout: CellLayout, mask: torch.Tensor, specs: dict) -> dict[str, torch.Tensor]:
    """{key index: [batch, seq, count]} -> {component: [batch, real position, layer, count]}."""
    lengths = mask.sum(-1).tolist()
    real = mask.cpu().bool()
    out: dict[str, torch.Tensor] = {}
    for key_index, values in units.items():
        layer, comp = layout.keys[key_index]
        if comp not in out:
            out[comp] = torch.zeros(
                len(lengths), max(lengths), layout.num_layers, specs[key_index].count, dtype=values.dtype
            )
        for b in range(len(lengths)):
            kept = values[b][real[b]]
            out[comp][b, : kept.shape[0], layer] = kept
    return out


def _to_cells(effects: torch.Tensor, layout: CellLayout, mask: torch.Tensor):
    """[num_keys, batch, seq] in tensor positions -> per-layer and model-level tensors indexed by
    real-token position."""
    batch = mask.shape[0]
    lengths = mask.sum(-1).tolist()
    width = max(lengths)
    cells = torch.zeros(batch, width, layout.num_layers, len(layout.layer_components), dtype=effects.dtype)
    model_level = torch.zeros(batch, width, len(layout.model_components), dtype=effects.dtype)
    effects, mask = effects.cpu(), mask.cpu().bool()
    slots = [layout.slot(i) for i in range(len(layout.keys))]
    per_layer = [i for i, (layer, _) in enumerate(slots) if layer is not None]
    model = [i for i, (layer, _) in enumerate(slots) if layer is None]
    layer_of = torch.tensor([slots[i][0] for i in per_layer], dtype=torch.long)
    comp_of = torch.tensor([slots[i][1] for i in per_layer], dtype=torch.long)
    model_of = torch.tensor([slots[i][1] for i in model], dtype=torch.long)
    for b in range(batch):
        real = effects[:, b, mask[b]]  # [num_keys, length]
        n = real.shape[1]
        if per_layer:
            cells[b][:n, layer_of, comp_of] = real[per_layer].T
        if model:
            model_level[b][:n, model_of] = real[model].T
    return cells, model_level, [int(n) for n in lengths]
