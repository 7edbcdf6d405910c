"""Pretrained weights shipped with the package, so that a cold build need not pretrain.

The default organism is pretrained longer than a cold demo could afford on two cores (issue 18),
so its pretrained weights ship with the package. A shipped model is two files in `training/shipped/`:
`builtin-<size>-pretrained.safetensors` (the bytes of the pretrained folder's model.safetensors) and
a `.json` record beside it: the sha256 of the build step's recipe the weights were made from, the
weights' sha256, and the sha256 of the model after the recipe's first `FIRST_STEPS` steps (a test
retrains those steps to show that the recipe, run here, still makes these weights). Bit-for-bit
equality holds only on the machine that made them (another CPU sums in another order), so the
record also keeps a small probe of that model (`state_probe`: each tensor's norm and its
projections on fixed random sign vectors), and the test compares the model it remakes with the
probe's within `PROBE_TOLERANCE` of relative distance, well under what one more step moves. A build uses
the weights only when its recipe's sha256 matches the record's; any other recipe is pretrained
here. `weightgraft pretrain --from-scratch --ship-to FOLDER` remakes both files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import torch

from weightgraft.atomic import write_atomic, write_json
from weightgraft.runtime import sha256_file, sha256_json

SHIPPED = Path(__file__).parent / "shipped"
FIRST_STEPS = 3  # pretraining steps whose result the record pins (cheap to retrain in a test)
WEIGHTS_FILE = "model.safetensors"  # the file of a pretrained folder that ships
PROBE_DIRECTIONS = 16  # random sign vectors each tensor is projected on
# Relative L2 distance (||remade - recorded|| / ||recorded|| over the whole state, estimated from
# the probes) within which a remade model is the recorded one. Another CPU's summation order
# changes float32 sums in their last bits, which three steps carry to far below this; one more
# step of the default recipe moves the weights by 6.3e-3 (the test checks that it stays above).
PROBE_TOLERANCE = 1e-3


def shipped_paths(size: str, folder: Path | None = None) -> tuple[Path, Path]:
    """(weights, record) of the pretrained model of `size` shipped in `folder` (default: the
    package's, `SHIPPED`, looked up at each call), whether or not they exist."""
    stem = Path(folder or SHIPPED) / f"builtin-{size}-pretrained"
    return stem.with_suffix(".safetensors"), stem.with_suffix(".json")


def read_record(size: str, folder: Path | None = None) -> dict | None:
    """The shipped record of `size`, or None when nothing ships for it."""
    _, record = shipped_paths(size, folder)
    return json.loads(record.read_text()) if record.exists() else None


def find_shipped(size: str, recipe: dict, folder: Path | None = None) -> Path | None:
    """The shipped weights of `size` if they were made from `recipe` and are intact, else None."""
    weights, _ = shipped_paths(size, folder)
    record = read_record(size, folder)
    if record is None or not weights.exists() or record["recipe_sha256"] != sha256_json(recipe):
        return None
    return weights if sha256_file(weights) == record["weights_sha256"] else None


def state_sha256(model: torch.nn.Module) -> str:
    """sha256 over a model's state dict: each tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        data = tensor.detach().cpu().contiguous()
        digest.update(f"{name}\0{data.dtype}\0{tuple(data.shape)}\n".encode())
        digest.update(data.view(torch.uint8).numpy().tobytes() if data.numel() else b"")
    return digest.hexdigest()


def state_probe(model: torch.nn.Module) -> dict[str, dict]:
    """Per tensor (in name order): its L2 norm and its projections on `PROBE_DIRECTIONS` random
    sign vectors seeded by its name (NumPy's PCG64, the same on every machine). Differences of
    two states keep their length under such projections on average, so two probes tell how far
    apart two models are, in a few numbers per tensor."""
    out = {}
    for name, tensor in sorted(model.state_dict().items()):
        values = tensor.detach().cpu().double().reshape(-1).numpy()
        seed = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
        signs = np.random.default_rng(seed).integers(0, 2, size=(PROBE_DIRECTIONS, values.size), dtype=np.int8)
        projections = (2.0 * signs - 1.0) @ values
        out[name] = {"norm": float(np.linalg.norm(values)), "projections": [float(x) for x in projections]}
    return out


def probe_distance(probe: dict[str, dict], reference: dict[str, dict]) -> float:
    """The relative L2 distance of the state `probe` was taken of from `reference`'s state,
    estimated from their projections (infinite when they hold different tensors)."""
    if probe.keys() != reference.keys():
        return float("inf")
    squared = sum(
        float(np.mean((np.array(probe[n]["projections"]) - np.array(reference[n]["projections"])) ** 2))
        for n in reference
    )
    total = sum(reference[n]["norm"] ** 2 for n in reference)
    return float(np.sqrt(squared / total)) if total > 0 else float("inf")


def write_shipped(
    pretrained: Path,
    size: str,
    recipe: dict,
    first_steps_sha256: str,
    folder: Path,
    first_steps_probe: dict | None = None,
) -> Path:
    """Ship the pretrained folder's weights under `folder` with their record (and the probe of the
    model after the first steps, for the check on other machines); the weights' path."""
    weights, record = shipped_paths(size, folder)
    write_atomic(weights, lambda tmp: shutil.copyfile(Path(pretrained) / WEIGHTS_FILE, tmp))
    write_json(
        record,
        {
            "size": size,
            "recipe": recipe,
            "recipe_sha256": sha256_json(recipe),
            "weights_sha256": sha256_file(weights),
            "first_steps": FIRST_STEPS,
            "first_steps_sha256": first_steps_sha256,
            "first_steps_probe": first_steps_probe,
            "remake": f"weightgraft pretrain --size {size} --from-scratch --home NEW_FOLDER --ship-to FOLDER",
        },
    )
    return weights
