"""The folder-ownership tests' shared world: tiny models, a run dataset, a training dataset and
two run configs of other experiments, built once per module under its own WEIGHTGRAFT_HOME;
and `snapshot`, every file of a folder with its bytes, to show that nothing was touched."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from data_fixtures import small_facts
from exp_fixtures import build_models
from tiny_world import base_config, write_dataset
from weightgraft.data.build import build_dataset

SMALL = ["--facts-per-kind", "2", "--relation", "2", "--task", "2", "--texts-per-fact", "2"]
EXPERIMENT = {"name": "e", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", "SFT"]}
OTHER = {"name": "f", "dataset": "relation", "recipient": "pre", "donor": "sft", "conditions": ["PRE", "LT"]}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Tiny models, a run dataset and a training dataset, and two configs of other experiments."""
    root = tmp_path_factory.mktemp("world")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEIGHTGRAFT_HOME", str(root / "home"))
        models, data = build_models(root / "models", layers=2), write_dataset(root / "data")
        built = build_dataset(root / "built", small_facts()[1][:6], seed=0, texts_per_fact=2)
        for name, experiment in (("a", EXPERIMENT), ("b", OTHER)):
            config = base_config(models, data, [experiment]) | {"bootstrap": 10, "name": name}
            (root / f"{name}.yaml").write_text(yaml.safe_dump(config))
        yield {"root": root, "models": models, "data": data, "built": Path(built)}


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
