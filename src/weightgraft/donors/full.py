"""A donor that is a whole second model in memory: the donor module is the model's own module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn


class FullDonor:
    """A full donor model; it is only read (eval mode during a call, its mode restored after)."""

    def __init__(self, model: nn.Module):
        config = getattr(model, "config", None)
        if getattr(config, "model_type", None) is None:
            raise TypeError("a donor model must be a Hugging Face model with a .config (e.g. AutoModelForCausalLM)")
        self.model = model
        self.config = config

    def parameter_shapes(self) -> dict[str, torch.Size]:
        return {name: p.shape for name, p in self.model.named_parameters()}

    def check_against(self, recipient: nn.Module) -> None:
        if self.model is recipient:
            raise ValueError(
                "the donor is the recipient itself: grafting a model into itself changes nothing. "
                "Pass a separate model as the donor (e.g. a finetuned copy, or copy.deepcopy(model))"
            )
        r_params = dict(recipient.named_parameters())
        d_params = dict(self.model.named_parameters())
        dtypes = [
            f"{n} (recipient {p.dtype}, donor {d_params[n].dtype})"
            for n, p in r_params.items()
            if n in d_params and p.dtype != d_params[n].dtype
        ]
        if dtypes:
            target = next(iter(r_params.values())).dtype
            raise ValueError(
                f"donor parameters differ in dtype from the recipient's: {_few(dtypes)}; "
                f"cast the donor to the recipient's dtypes (e.g. donor.to({target}))"
            )
        devices = [
            f"{n} (recipient {p.device}, donor {d_params[n].device})"
            for n, p in r_params.items()
            if n in d_params and p.device != d_params[n].device
        ]
        if devices:
            raise ValueError(
                f"donor parameters are on other devices than the recipient's: {_few(devices)}; "
                "move both models to one device"
            )

    def module(self, path: str) -> nn.Module:
        return self.model.get_submodule(path)

    @contextmanager
    def running(self) -> Iterator[None]:
        was_training = self.model.training
        self.model.eval()
        try:
            yield
        finally:
            self.model.train(was_training)


def _few(items: list[str], limit: int = 6) -> str:
    more = f" (and {len(items) - limit} more)" if len(items) > limit else ""
    return "; ".join(items[:limit]) + more
