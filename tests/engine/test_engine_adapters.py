"""`adapter_for(model).decoder_layers(model)` is the model's own stack of decoder blocks, and each
block's output (or its `[0]`) is the residual stream after that block, as the docs promise."""

from __future__ import annotations

import random

import pytest
import torch

from engine_fixtures import pair, random_prompt
from tiny_model_fixtures import ARCHS, model_type_of, num_layers


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
    # hidden_states[i + 1] is the stream after block i (the last entry is after the final norm).
    # Bit-identical: both are block i's output in the same forward pass.
    for i in range(num_layers(recipient) - 1):
        assert torch.equal(captured[i], hidden[i + 1]), f"{arch}: block {i} output is not the residual stream"


@pytest.mark.parametrize("arch", ARCHS)
def test_adapter_paths_exist_and_cover_every_parameter_without_weights(arch):
    """On the meta device (shapes, no weights): every path the adapter names is a module of the
    model, every parameter belongs to some named module, and each fused module's split rule
    gives every output feature to exactly one part."""
    import transformers as hf

    from tiny_model_fixtures import make_config
    from weightgraft.adapters import adapter_for
    from weightgraft.adapters.coverage import adapter_module_paths, uncovered_parameters

    config = make_config(arch)
    with torch.device("meta"):
        model = hf.AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    assert all(p.is_meta for p in model.parameters())
    adapter = adapter_for(model)
    paths = adapter_module_paths(model, adapter)
    modules = dict(model.named_modules())
    missing = [p for p in paths if p not in modules]
    assert not missing, f"{arch}: the adapter names modules the model lacks: {missing}"
    assert uncovered_parameters(model, adapter) == [], f"{arch}: parameters no component owns"
    for local, rule in adapter.splits.items():
        module = modules[f"{adapter.layers}.0.{local}"]
        width = getattr(module, "out_features", None) or module.nf  # nn.Linear, or GPT-2's Conv1D
        parts = torch.cat(list(rule(config).values()))
        assert sorted(parts.tolist()) == list(range(width)), f"{arch}: split of {local!r} is not a partition"


def test_readme_adapter_example_runs_as_written(registry_restored):
    """The README's "Adding an architecture" snippet imports and registers as shown."""
    from pathlib import Path

    from weightgraft.adapters import adapter_for

    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("#### Adding an architecture") :]
    snippet = section.split("```python", 1)[1].split("```", 1)[0]
    exec(compile(snippet, "README.md", "exec"), {})
    adapter = adapter_for("my_arch")
    assert adapter.per_layer["k"].part == "k" and "attn.wqkv" in adapter.splits
