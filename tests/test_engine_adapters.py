"""`adapter_for(model).decoder_layers(model)` is the model's own stack of decoder blocks, and each
block's output (or its `[0]`) is the residual stream after that block, as the docs promise."""

from __future__ import annotations

import random

import pytest
import torch

from engine_helpers import max_diff, pair, random_prompt, single_thread
from engine_tiny_models import ARCHS, model_type_of, num_layers

assert single_thread  # autouse fixture, imported for its effect


@pytest.mark.parametrize("arch", ARCHS)
def test_decoder_layers_are_the_blocks_and_give_the_residual_stream(arch):
    from weightgraft.adapters import adapter_for
    recipient, _ = pair(arch)
    layers = adapter_for(recipient).decoder_layers(recipient)
    assert isinstance(layers, torch.nn.ModuleList) and len(layers) == num_layers(recipient)
    names = {id(m): n for n, m in recipient.named_modules()}
    assert all(id(block) in names for block in layers), f"{arch}: blocks are not the model's own modules"
    assert model_type_of(arch) == recipient.config.model_type

    captured = {}

    def keep(index):
        def hook(module, args, output):
            captured[index] = (output[0] if isinstance(output, tuple) else output).detach().clone()
        return hook

    handles = [block.register_forward_hook(keep(i)) for i, block in enumerate(layers)]
    try:
        ids = torch.tensor([random_prompt(random.Random(0), 5)])
        with torch.no_grad():
            hidden = recipient(ids, output_hidden_states=True).hidden_states
    finally:
        for handle in handles:
            handle.remove()
    # hidden_states[i + 1] is the stream after block i (the last entry is after the final norm)
    for i in range(num_layers(recipient) - 1):
        assert max_diff(captured[i], hidden[i + 1]) < 1e-6, f"{arch}: block {i} output is not the residual stream"
