"""The forward hooks of one attribution pass: each hooked module's output mixed towards its
donor's by `alpha`, with the change (delta) and the mixed output kept for the products.

A module is called on its own input, whole (not on rows): `x` for a position-wise module, every
argument for a "flat" one (`moe_cells`); a MoE router's cell is measured at its experts' output.
"""

from __future__ import annotations

import torch
from torch import nn

from weightgraft.attribution.cells import CellLayout
from weightgraft.attribution.moe_cells import expert_deltas, router_delta


class EffectHooks:
    """State of one pass: outputs (to differentiate), deltas, inputs of input-column units, each
    expert's delta for expert units, and the donor's routing per router."""

    def __init__(self, layout: CellLayout, units: dict, alpha: float, gradients: bool):
        self.alpha, self.gradients = alpha, gradients
        self.outputs: dict[str, torch.Tensor] = {}
        self.deltas: dict[str, torch.Tensor] = {}
        self.inputs: dict[str, torch.Tensor] = {}  # modules with input-column units: their input
        self.expert_deltas: dict[str, torch.Tensor] = {}
        self.routing: dict[str, tuple] = {}  # router path -> the donor router's output
        self.input_side = {t.path for t in layout.targets for k, _ in t.keys if k in units and units[k].side == "in"}
        self.forms = {t.path: t.form for t in layout.targets}
        # "per_expert" experts (Llama 4) have one output row per token and expert: each expert's
        # delta is its own rows of the whole delta, read off in the products (attribute._products).
        self.expert_units = {
            t.path: units[k].count
            for t in layout.targets
            for k, _ in t.keys
            if k in units and units[k].side == "expert" and t.form != "per_expert"
        }
        component = {t.path: layout.keys[t.keys[0][0]] for t in layout.targets}
        router_at = {layer: path for path, (layer, comp) in component.items() if comp == "router"}
        per_expert = {layer for path, (layer, comp) in component.items() if self.forms[path] == "per_expert"}
        # Their router's scores scale the experts' input (no top-k pair reaches the experts): its
        # cell is measured at its scores, mixed like any other output.
        self.score_routers = {router_at[layer] for layer in per_expert if layer in router_at}
        self.router_of = {
            path: router_at[layer]
            for path, (layer, comp) in component.items()
            if comp == "experts" and layer in router_at and layer not in per_expert
        }
        self.routers = set(router_at.values()) - self.score_routers

    def make(self, path: str, donor_module: nn.Module):
        """The hook of the module at `path`."""

        def hook(module, args, kwargs, output):
            if path in self.routers:
                return self._router(path, donor_module, args, kwargs, output)
            if path in self.score_routers and isinstance(output, (tuple, list)):
                mixed = hook(module, args, kwargs, output[0])
                scores = mixed if mixed is not None else output[0]
                return type(output)((scores, *output[1:]))
            if not isinstance(output, torch.Tensor):
                raise RuntimeError(f"cannot attribute {path!r}: its output is not a tensor; check the adapter")
            flat = self.forms.get(path) in ("flat", "whole")  # called on every argument it got
            x = args[0] if args else next(iter(kwargs.values()))
            if path in self.input_side:
                self.inputs[path] = x.detach()

            def donor_output() -> torch.Tensor:
                out = donor_module(*args, **kwargs) if flat else donor_module(x)
                out = out[0] if path in self.score_routers else out  # a router's scores
                return out.to(output.dtype)

            if not self.gradients:
                return output + self.alpha * (donor_output() - output)
            with torch.no_grad():
                extra = self._extras(path, module, donor_module, args, kwargs, output)
            if self.alpha == 0.0:
                with torch.no_grad():
                    self.deltas[path] = donor_output() - output
                y = output
            else:  # the donor's module on the current, mixed input: gradients run through it too
                change = donor_output() - output
                self.deltas[path] = change.detach()
                y = output + self.alpha * (change + extra)
            y = y if y.requires_grad else y.detach().requires_grad_()
            self.outputs[path] = y
            if path in self.router_of:
                self.outputs[self.router_of[path]] = y
            return y

        return hook

    def _router(self, path: str, donor_module: nn.Module, args: tuple, kwargs: dict, output):
        """Keep the donor's routing for the experts; hand it on in the donor-everywhere pass."""
        with torch.no_grad():
            self.routing[path] = donor_module(*args, **kwargs)
        if not self.gradients and self.alpha == 1.0:
            return self.routing[path]
        return None

    def _extras(self, path: str, module, donor_module, args, kwargs, output) -> torch.Tensor | float:
        """An experts module's router delta (added to the mixing) and its experts' deltas."""
        if path in self.expert_units:
            self.expert_deltas[path] = expert_deltas(
                path, module, donor_module, args, kwargs, output, self.expert_units[path]
            )
        router = self.router_of.get(path)
        if router is None or router not in self.routing:
            return 0.0
        self.deltas[router] = router_delta(module, args, kwargs, output, self.routing[router])
        return self.deltas[router]
