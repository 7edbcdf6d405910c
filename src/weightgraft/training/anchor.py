"""A pull of every trained weight back towards the pretrained model (`FinetuneConfig.anchor`).

AdamW's weight decay pulls weights towards zero; this pulls them towards where they started:
after each optimizer step, w <- w - lr * anchor * (w - w_pretrained), at the step's learning rate
(decoupled, as AdamW's decay is). A weight the facts keep pushing settles where the push and the
pull balance; a weight pushed only now and then drifts back. Interpolating a finished finetune
towards PRE (`training.average`) shrinks every weight's change by the same share; the anchor lets
training choose which changes to keep (issue 40: a lever against forgetting, measured in
`docs/real_models.md`).
"""

from __future__ import annotations

import torch
from transformers import TrainerCallback


class AnchorToStart(TrainerCallback):
    """Holds a copy of each trainable weight as it was at the start (or the given `reference`
    model's weight of the same name, to share a frozen copy already made) and pulls towards it."""

    def __init__(self, model: torch.nn.Module, strength: float, reference: torch.nn.Module | None = None):
        if strength <= 0:
            raise ValueError(f"an anchor's strength must be > 0, not {strength}")
        self.strength = strength
        start = dict(reference.named_parameters()) if reference is not None else {}
        self.weights: list[torch.Tensor] = []
        self.starts: list[torch.Tensor] = []
        for name, weight in model.named_parameters():
            if not weight.requires_grad:
                continue
            origin = start.get(name)
            if origin is None or origin.shape != weight.shape:
                origin = weight.detach().clone()
            self.weights.append(weight)
            self.starts.append(origin.detach())

    def moved(self) -> list[torch.Tensor]:
        """Each weight's change from its start (for the tests)."""
        return [w.detach() - s for w, s in zip(self.weights, self.starts, strict=True)]

    @torch.no_grad()
    def on_optimizer_step(self, args, state, control, optimizer=None, **kwargs):
        rate = optimizer.param_groups[0]["lr"] * self.strength
        if rate == 0:
            return
        starts = [s.to(w.device) for w, s in zip(self.weights, self.starts, strict=True)]
        changes = torch._foreach_sub(self.weights, starts)
        torch._foreach_add_(self.weights, changes, alpha=-rate)
