"""The census: every decoder-only causal-LM type of the installed transformers, grafted for real.

For each type a tiny random model is built (`census_models`), its adapter registered or inferred,
and then, against a perturbed donor:

- no graft must equal the recipient and grafting everything the donor;
- one position x layer x component graft, one head graft and, on a MoE model, one expert graft
  must equal the per-token reference (`reference_grafter`, which copies parameters into a fresh
  model token by token and shares no code with the engine; its table for a type with no
  hand-written one is read off the adapter's module paths, so this checks the engine's mechanics
  on every type, and the roles are checked by behaviour when the adapter is inferred);
- or the refusal's one-line reason is recorded.

`python tests/support/census.py` writes docs/architectures.md; tests/adapters/test_census.py
fails when a type's status gets worse than that file records.
"""

from __future__ import annotations

import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

import census_models
import reference_grafter as ref

# float32 rounding, as the engine tests (engine_fixtures.ATOL): the engine splices rows of a
# batched pass, the reference runs one token at a time.
ATOL = 1e-4
STATUS_ORDER = {"exact": 0, "refused": 1, "wrong": 2, "error": 3, "not decoder": 4}
DOC = Path(__file__).resolve().parents[2] / "docs" / "architectures.md"


@dataclass(frozen=True)
class Entry:
    model_type: str
    family: str  # dense, moe, hybrid, encoder, multimodal, unbuildable
    status: str  # exact, refused, wrong, error, not decoder
    adapter: str  # registered, inferred, alias of T, or "" when none
    reason: str  # one line: the refusal, the failing check, or the checks passed


def run_census(types: list[str] | None = None, progress: bool = False) -> list[Entry]:
    torch.set_num_threads(1)
    entries = []
    for model_type in types or census_models.census_types():
        start = time.time()
        entries.append(census_one(model_type))
        if progress:
            e = entries[-1]
            print(
                f"{model_type:28s} {e.family:11s} {e.status:8s} {time.time() - start:5.1f}s {e.reason[:90]}", flush=True
            )
    return entries


def census_one(model_type: str) -> Entry:
    from weightgraft.adapters import AdapterError, adapter_for

    kind = census_models.classify(model_type)
    if kind.family not in ("dense", "moe"):
        return Entry(model_type, kind.family, "not decoder", "", kind.reason)
    try:
        recipient = census_models.build_tiny(model_type, 0)
        donor = census_models.donor_of(recipient, 1)
    except Exception as error:  # noqa: BLE001  recorded, one line
        return Entry(model_type, kind.family, "error", "", f"cannot build: {_line(error)}")
    try:
        adapter = adapter_for(recipient)
    except AdapterError as error:
        return Entry(model_type, kind.family, "refused", "", _line(error))
    except Exception as error:  # noqa: BLE001
        return Entry(model_type, kind.family, "error", "", f"adapter: {_line(error)}")
    try:
        failed = check_grafts(recipient, donor, adapter, kind.family == "moe")
    except AdapterError as error:
        return Entry(model_type, kind.family, "refused", adapter.origin, _line(error))
    except Exception as error:  # noqa: BLE001
        return Entry(model_type, kind.family, "error", adapter.origin, f"grafting: {_line(error)}")
    if failed:
        return Entry(model_type, kind.family, "wrong", adapter.origin, failed)
    checks = "none/all, a cell, a head" + (", an expert" if kind.family == "moe" else "")
    return Entry(model_type, kind.family, "exact", adapter.origin, f"equal to the reference: {checks}")


def _line(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return text.replace("|", "/")[:300]


def check_grafts(recipient, donor, adapter, moe: bool) -> str:
    """'' when every check passes, else the first failure in words."""
    from weightgraft import Graft, Grafter

    ref.register_table(recipient.config.model_type, adapter_table(recipient, adapter))
    grafter = Grafter(recipient, donor)
    row = [random.Random(7).randrange(3, 200) % _vocab(recipient) for _ in range(6)]
    ids = torch.tensor([row])
    with torch.no_grad():
        plain, other = recipient(ids).logits[0], donor(ids).logits[0]
    checks = [
        ("no graft = recipient", grafter.logits(ids)[0], plain),
        ("everything = donor", grafter.logits(ids, grafts=Graft())[0], other),
    ]
    layers = len(adapter.decoder_layers(recipient))
    for component in _probe_components(adapter):
        spec = ref.GraftSpec([1, -1], layers - 1, component)
        got = grafter.logits(ids, grafts=Graft([1, -1], layers - 1, component))[0]
        checks.append((f"{component} at 2 positions", got, ref.reference_logits(recipient, donor, ids[0], spec)))
    if "o" in adapter.per_layer:
        spec = ref.GraftSpec("last", layers - 1, "o", heads=[1])
        got = grafter.logits(ids, grafts=Graft("last", layers - 1, "o", heads=[1]))[0]
        checks.append(("head 1 of o", got, ref.reference_unit_logits(recipient, donor, ids[0], spec)))
    if moe and "experts" in adapter.per_layer:
        spec = ref.GraftSpec("all", layers - 1, "experts", experts=[1])
        got = grafter.logits(ids, grafts=Graft("all", layers - 1, "experts", experts=[1]))[0]
        checks.append(("expert 1", got, ref.reference_unit_logits(recipient, donor, ids[0], spec)))
    for name, got, want in checks:
        diff = (got.float() - want.float()).abs().max().item()
        if not diff < ATOL:
            return f"{name}: max abs diff {diff:.3g}"
    return ""


def _vocab(model) -> int:
    return int(model.config.get_text_config().vocab_size)


def _probe_components(adapter) -> list[str]:
    """The per-layer leaf components, and the MoE ones."""
    return [c for c in adapter.per_layer]


def adapter_table(model, adapter) -> tuple[dict, dict, str]:
    """The reference's table for a type without a hand-written one: each component's module path
    and, for a fused part, its output features (read off the adapter, no engine code)."""
    from weightgraft.adapters.base import Part

    config = model.config
    layer = {}
    for comp, entry in adapter.per_layer.items():
        layer[comp] = []
        for refpath in entry if isinstance(entry, tuple) else (entry,):  # a chain: every module's parameters
            if isinstance(refpath, Part):
                cols = adapter.splits[refpath.module](config)[refpath.part]
                layer[comp].append((refpath.module, torch.as_tensor(cols)))
            else:
                layer[comp].append((refpath, None))
    model_level = {
        comp: [(path, None) for path in (entry if isinstance(entry, tuple) else (entry,))]
        for comp, entry in adapter.model_level.items()
    }
    return layer, model_level, adapter.layers + ".{i}."


def write_doc(entries: list[Entry], path: Path = DOC) -> None:
    import transformers

    decoders = [e for e in entries if e.family in ("dense", "moe")]
    lines = [
        "# Architectures: the census",
        "",
        f"Every causal-LM model type of transformers {transformers.__version__}, each built as a tiny random "
        "model and grafted for real (`tests/support/census.py`; regenerate with "
        "`.venv/bin/python tests/support/census.py`). `tests/adapters/test_census.py` fails when a type's "
        "status gets worse than this file records.",
        "",
        "- **exact**: no graft equals the recipient, grafting everything the donor, and a graft of each "
        "component at two positions of the last layer, a head graft and (MoE) an expert graft equal the "
        "per-token reference grafter;",
        "- **refused**: weightgraft says why in one line (the reason below) and grafts nothing;",
        "- **wrong** / **error**: a check failed or crashed (none should remain);",
        "- **not decoder**: hybrids (SSM, recurrent, linear attention), encoders and multimodal wrappers.",
        "",
        "Adapter: `registered` (hand-written, the fast path), `alias of T` (the model's table equals T's), "
        "or `inferred` (decided by behaviour on a probe pass, `weightgraft.adapters.infer`).",
        "",
        _totals(decoders),
        "",
        "| model type | family | status | adapter | reason |",
        "| --- | --- | --- | --- | --- |",
    ]
    for e in sorted(entries, key=lambda e: (STATUS_ORDER[e.status], e.family, e.model_type)):
        lines.append(f"| `{e.model_type}` | {e.family} | {e.status} | {e.adapter} | {e.reason} |")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _totals(decoders: list[Entry]) -> str:
    rows = ["| family | types | exact | refused | wrong or error |", "| --- | ---: | ---: | ---: | ---: |"]
    for family in ("dense", "moe"):
        group = [e for e in decoders if e.family == family]
        count = {s: sum(e.status == s for e in group) for s in STATUS_ORDER}
        rows.append(
            f"| {family} | {len(group)} | {count['exact']} | {count['refused']} | {count['wrong'] + count['error']} |"
        )
    exact = sum(e.status == "exact" for e in decoders)
    rows.append(f"| **decoder-only, all** | {len(decoders)} | **{exact}** | | |")
    return "\n".join(rows)


def read_doc(path: Path = DOC) -> dict[str, str]:
    """model type -> status, as docs/architectures.md records it."""
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`"):
            out[cells[0].strip("`")] = cells[2]
    return out


if __name__ == "__main__":
    found = run_census(sys.argv[1:] or None, progress=True)
    if not sys.argv[1:]:
        write_doc(found)
        print(f"wrote {DOC}")
