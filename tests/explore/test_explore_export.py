"""The Python the page exports, run as exported in a fresh interpreter (no hub: HF_HUB_OFFLINE), on
the tiny world's folders and on a catalogue recipient (`smollm2-135m`, where its package is
installed): its probabilities must be the page's."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

import tiny_world
from weightgraft.explore.grid import Cells

PROMPT = tiny_world.make_prompts()[2]
SMOLLM2 = "smollm2-135m"


def _run_exported(code: str, home) -> list[float]:
    """`code` run by a new Python (as a user pastes it), offline; its `probs` of the page's top tokens."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WEIGHTGRAFT_HOME": str(home), "OMP_NUM_THREADS": "1"}
    script = code + "\nimport json, sys\nprint(json.dumps(probs.tolist()), file=sys.stderr)\n"
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stderr.strip().splitlines()[-1])


def _check_graft_row(result: dict, probs: list[float]) -> None:
    row = next(r for r in result["predictions"] if r["name"] == "graft")
    shown = torch.tensor([t["prob"] for t in row["top"]])
    got = torch.tensor(probs)[[t["id"] for t in row["top"]]]
    assert torch.allclose(got, shown, atol=1e-5), (got, shown)


def test_the_exported_python_runs_as_exported_on_the_tiny_world(session, tmp_path):
    encoded = session.encode(PROMPT.text, PROMPT.target, PROMPT.id)
    result = session.predict(encoded, [Cells("sft", "FFN", 3, (7,)), Cells("task", "EMB", None, (1, 2))])
    assert "load_model(" in result["python"]
    _check_graft_row(result, _run_exported(result["python"], tmp_path))


def _smollm2_skip():
    from weightgraft.pretrained import CATALOG

    model = CATALOG[SMOLLM2]
    if importlib.util.find_spec(model.module) is None:
        return pytest.mark.skip(reason=f"{model.package} is not installed ({model.install}): no catalogue model to run")
    if importlib.util.find_spec("gguf") is None:
        return pytest.mark.skip(reason="converting a catalogue model needs the `gguf` package (weightgraft[real])")
    return pytest.mark.skipif(False, reason="the catalogue model is installed")


@_smollm2_skip()
def test_the_exported_python_loads_a_catalogue_recipient_by_name(tmp_path, monkeypatch):
    """Before: `from_pretrained('smollm2-135m')`, which asks the hub for a repository of that name."""
    from weightgraft.engine.grafter import Grafter
    from weightgraft.experiments.models import load_model, load_tokenizer
    from weightgraft.explore.export import ModelNames
    from weightgraft.explore.session import ExploreSession

    monkeypatch.setenv("WEIGHTGRAFT_HOME", str(tmp_path / "home"))
    recipient = load_model(SMOLLM2, "cpu", "float32")
    donor = copy.deepcopy(recipient)
    with torch.no_grad():  # a stand-in finetune: the last layer's MLP moved
        donor.model.layers[-1].mlp.down_proj.weight.mul_(1.5)
    donor.save_pretrained(tmp_path / "donor")
    names = ModelNames(SMOLLM2, {"ft": str(tmp_path / "donor")})
    session = ExploreSession(Grafter(recipient, donors={"ft": donor}), load_tokenizer(SMOLLM2), names=names)
    encoded = session.encode(" Tom Hanks stars in a movie alongside", " Meg")
    last = len(encoded.input_ids) - 1
    result = session.predict(encoded, [Cells("ft", "FFN", session.grid.num_layers - 1, (last,))])
    assert f"load_model({SMOLLM2!r}" in result["python"] and "from_pretrained" not in result["python"]
    _check_graft_row(result, _run_exported(result["python"], tmp_path / "home"))
