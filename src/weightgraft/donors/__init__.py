"""Where a donor module's output comes from.

The engine grafts by replacing a recipient module's output at grafted rows with "the donor's
module" applied to the same input. A `DonorSource` is anything that can hand out that module for a
recipient module path, so that the hooks never care whether the donor is a second model in
memory (`FullDonor`), tensors read lazily from a checkpoint, or the recipient plus an adapter.

The interface, in full (`Grafter` uses nothing else):

- `config`: the donor's Hugging Face config. The engine compares it with the recipient's on every
  field that changes the computation, before anything else.
- `parameter_shapes() -> dict[str, torch.Size]`: every donor parameter by its name in the
  recipient's naming (`model.layers.0.mlp.up_proj.weight`). The engine compares names and shapes
  with the recipient's; a lazy source can answer from checkpoint headers without reading tensors.
- `check_against(recipient)`: the checks only this kind of source can make (for a full model:
  not the recipient itself, same device and dtype per parameter). Raise ValueError/TypeError with
  the fix in the message.
- `module(path) -> nn.Module`: a module whose forward computes the donor's output for the
  recipient module at `path` (same input, same output shape), on the device and in the dtype the
  recipient module runs in. Called once per hooked path when a call's hooks are installed, so a
  lazy source can load on demand here. It must not modify the recipient.
- `running()`: a context manager around each engine call, e.g. to put the donor in eval mode and
  restore its mode afterwards.

Optional members, used when present:

- a donor module with `adds_to_output = True` returns a delta that the engine adds to the
  recipient module's own output at the grafted rows (an adapter's change), instead of an output
  that replaces it;
- `changed_paths() -> set[str]`: the only module paths whose output the donor changes (an
  adapter's targets), for `Grafter.changed_components`;
- `prefetch(paths)` and `release()`: load ahead, and free, what `module(path)` loads.

`ShapedDonor(donor, scale=..., rank=..., top=...)` wraps any source: the donor's change to the
recipient scaled, truncated to its top singular directions, or kept in its largest entries, per
matrix (`shaped.py`).

`as_donor_source(obj, recipient)` turns what a user passes to `Grafter` into a source: a model in
memory (`FullDonor`), a checkpoint folder or hub id (`LazyDonor`), an adapter folder with
adapter_config.json or a `peft.PeftModel` (`LoraDonor`, bound to `recipient`).
"""

from weightgraft.donors.full import FullDonor
from weightgraft.donors.lazy import LazyDonor
from weightgraft.donors.lora import LoraDonor
from weightgraft.donors.shaped import ShapedDonor, ShapeError
from weightgraft.donors.sources import DonorSource, as_donor_source

AdapterDonor = LoraDonor  # its name before "adapter" meant only the architecture tables; users' code still runs

__all__ = ["LoraDonor", "DonorSource", "FullDonor", "LazyDonor", "ShapeError", "ShapedDonor", "as_donor_source"]
