"""How the engine calls each model-level module, decided by behaviour on a probe pass.

Most model-level modules (the token embedding, a final norm, the unembedding, GPT-2's position
embedding) read rows of [batch, seq, ...] and are called on the grafted rows. Some do not: OPT's
and BioGPT's position embeddings read the attention mask and count positions along it, so on
rows they crash or give other numbers. Such a module gets the call form "whole": the donor's
module runs on exactly the arguments the recipient's got, and its output rows are spliced.
The probe calls each module on rows as the engine would; where that is not its own output and
the "whole" call is, the form is "whole".
"""

from __future__ import annotations

import torch
from torch import nn

from weightgraft.adapters.call_check import call_problems

# One row of this many tokens: batch (1) and sequence axes differ.
PROBE_LENGTH = 5


@torch.no_grad()
def model_call_forms(model: nn.Module, paths: list[str]) -> dict[str, str]:
    """{path: "whole"} for the model-level modules at `paths` that cannot be called on rows but
    can be called on their own arguments; the others keep the default "rows" (and where neither
    works, `check_adapter` names the problem)."""
    forms: dict[str, str] = {}
    busy: list[bool] = []  # set while a module is called again from its hook: hooks stay quiet

    def watch(path: str):
        def hook(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
            if busy or path in forms:
                return
            busy.append(True)
            try:
                rows = call_problems(path, module, "rows", 1, args, kwargs, output, PROBE_LENGTH)
                whole = rows and not call_problems(path, module, "whole", 1, args, kwargs, output, PROBE_LENGTH)
                forms[path] = "whole" if whole else "rows"
            finally:
                busy.clear()

        return hook

    handles = [model.get_submodule(p).register_forward_hook(watch(p), with_kwargs=True) for p in paths]
    ids = torch.arange(1, PROBE_LENGTH + 1, device=next(model.parameters()).device)[None]
    try:
        model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return {path: form for path, form in forms.items() if form != "rows"}
