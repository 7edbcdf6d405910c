"""What every test shares: one thread for torch, and the tiny-model factory.

The tests mirror the package: `tests/engine/` tests `weightgraft.engine`, `tests/paper/` the
paper's presets and reproduce job, and so on; `tests/reliability/` holds the guarantees against
lost work that cross packages, `tests/architecture/` the import and function-length rules. Every
support module is in `tests/support/` (on the path through pyproject.toml's `pythonpath`). Helper
modules are named `*_fixtures.py`: `tiny_model_fixtures` (random tiny models of every
architecture), `engine_fixtures` (cached pairs, padding, random grafts), `donor_fixtures`,
`exp_fixtures`, `data_fixtures`, `tokenizer_fixtures`, `training_fixtures`, `data_cli_fixtures`.
The independent per-token reference grafter is `tests/support/reference_grafter.py` and the tiny
world of the experiment tests is `tests/support/tiny_world.py`: importable here through pytest's
`pythonpath` setting (pyproject.toml), and by the benchmarks, which put `tests/support` on their path.
"""

from __future__ import annotations

import pytest
import torch

from tiny_model_fixtures import make_model


@pytest.fixture(autouse=True, scope="session")
def single_thread():
    """Tiny models run faster on one thread (the CI machine has 2 shared cores); restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def registry_restored():
    """Adapters a test registers are gone after it, so that no other test sees them."""
    from weightgraft.adapters import base

    saved = dict(base._REGISTRY)
    yield
    base._REGISTRY.clear()
    base._REGISTRY.update(saved)


@pytest.fixture
def tiny_model():
    """The factory `make_model(arch, seed, **config_overrides)`: a tiny random model of `arch`."""
    return make_model
