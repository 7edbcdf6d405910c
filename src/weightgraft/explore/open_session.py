"""Opening an explorer session on models named on the command line: the built-in family, or a
recipient, donors by name, and a dataset folder (for prompts with roles)."""

from __future__ import annotations

from pathlib import Path

from weightgraft.data.io import load_eval_prompts
from weightgraft.engine.grafter import Grafter
from weightgraft.errors import UserError
from weightgraft.experiments.models import DTYPES, load_model, load_tokenizer
from weightgraft.experiments.plan.checks import require_device_here
from weightgraft.experiments.vocabulary import ModelRole, builtin_role_models
from weightgraft.explore.export import ModelNames
from weightgraft.explore.session import ExploreSession, donors_from_mapping
from weightgraft.model_identity import refuse_same_model
from weightgraft.remote_code import refuse_remote_code
from weightgraft.runtime import resolve_device
from weightgraft.training.builtin import ensure_builtin


def parse_donors(items: list[str]) -> dict[str, str]:
    """`name=path` items -> {name: path}; a bad item is a plain error naming it."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise UserError(f"--donors {item!r}: write NAME=PATH, e.g. --donors task=./ckpt/task")
        if name.strip() in out:
            raise UserError(f"--donors: the name {name.strip()!r} is given twice; give each donor its own name")
        out[name.strip()] = path.strip()
    return out


def usable_device(device: str) -> str:
    """`device` ("auto" resolved) when this machine has it; a UserError before anything is
    built or loaded otherwise (a model loads for seconds to minutes before torch would say)."""
    device = resolve_device(device)
    require_device_here(device)
    return device


def refuse_unsafe_models(recipient: str, donors: dict[str, str], trust_remote_code: bool) -> None:
    """Before any weights load: no model that ships its own code unless allowed, and no donor
    that is the recipient itself (the same folder, a link to it, or a copy of its files)."""
    allow = "pass --trust-remote-code"
    refuse_remote_code(recipient, trust_remote_code, "--recipient", allow)
    for name, path in donors.items():
        refuse_remote_code(path, trust_remote_code, f"donor {name}", allow)
        refuse_same_model(recipient, path, ("--recipient", f"donor {name}"), "graft")


def builtin_models(size: str, home: str | None, progress: bool) -> tuple[str, dict[str, str], Path]:
    """The built-in family as the explorer offers it (built or reused): the pretrained model as
    recipient, each finetune as a donor under its run-config key, and the relation dataset."""
    art = ensure_builtin(size=size, home=Path(home) if home else None, progress=progress)
    models = builtin_role_models(art)
    recipient = models.pop(ModelRole.PRE)
    return recipient, {str(role): path for role, path in models.items()}, art.relation_data


def choose_models(
    builtin: str,
    recipient: str | None,
    donor: str | None,
    donors: dict[str, str],
    data: Path | None,
    home: str | None,
    progress: bool,
) -> tuple[str, dict[str, str], Path | None]:
    """The recipient, named donors and dataset to explore: the built-in family (size `builtin`,
    built or reused) when no recipient is given, else the recipient with `donor` (named `donor`)
    and `donors`. UserError for donors without a recipient or a second donor named `donor`."""
    if recipient is None:
        if donor is not None or donors:
            raise UserError("donors need a --recipient (or leave all three out for the built-in models)")
        recipient, donors, builtin_data = builtin_models(builtin, home, progress)
        return recipient, donors, data or builtin_data
    if donor is not None:
        if "donor" in donors:
            raise UserError("--donor is named `donor`; give the --donors entry another name")
        donors = {"donor": donor, **donors}
    return recipient, donors, data


def open_session(
    recipient: str,
    donors: dict[str, str],
    data: Path | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int | None = None,
    trust_remote_code: bool = False,
) -> ExploreSession:
    """Load the models (safetensors only; their own code only when `trust_remote_code`) and a
    dataset's evaluation prompts, after the checks that need no weights."""
    if dtype not in DTYPES:
        raise UserError(f"--dtype {dtype!r}: use one of {sorted(DTYPES)}")
    if not donors:
        raise UserError("give at least one donor: --donor PATH or --donors NAME=PATH (or --builtin default)")
    refuse_unsafe_models(recipient, donors, trust_remote_code)
    donors = donors_from_mapping(donors)
    tokenizer = load_tokenizer(recipient, trust_remote_code, field="--recipient")
    if not getattr(tokenizer, "is_fast", False):
        raise UserError(f"--recipient: {recipient} has no fast tokenizer (tokenizer.json); the explorer needs one")
    model = load_model(recipient, device, dtype, trust_remote_code, field="--recipient")
    loaded = {
        name: load_model(path, device, dtype, trust_remote_code, field=f"donor {name}") for name, path in donors.items()
    }
    grafter = Grafter(model, donors=loaded)
    prompts = load_eval_prompts(Path(data)) if data is not None else []
    names = ModelNames(recipient, dict(donors), dtype, device)
    return ExploreSession(grafter, tokenizer, prompts, names, threads=threads)
