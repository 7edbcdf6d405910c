"""The current graft as text a person copies: the Python that reproduces the page's numbers, and the
run-config condition that asks the same question of a whole dataset.

A run config names positions by role (FE, M, R, LT, other), so a graft whose positions are not a
union of this prompt's roles (or its complement) has no condition form; the note says why.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import yaml

from weightgraft.engine.graft import Graft
from weightgraft.experiments.conditions.position_roles import NotApplicable, parse_positions
from weightgraft.pretrained import is_pretrained_name

ROLE_ATOMS = ("FE", "M", "R", "LT", "other")
CONDITION_NAME = "explore"


@dataclass
class ModelNames:
    """Where the session's models came from, for the Python the page shows (the session holds
    it; the export is what reads it)."""

    recipient: str
    donors: dict[str, str]
    dtype: str = "float32"
    device: str = "cpu"


def python_code(
    text: str,
    input_ids: list[int],
    tokenizer_matches: bool,
    grafts: Sequence[Graft],
    names: ModelNames | None,
    whole_donors: bool = False,
) -> str:
    """Python that computes the graft's next-token probabilities, as `probs`; `whole_donors`: load
    the donors whole (a mixture-of-experts checkpoint, whose per-expert tensors transformers
    converts on loading, cannot be read lazily)."""
    lines = ["import torch", "from weightgraft import Graft, Grafter", ""]
    if names is not None:
        lines += _loading_lines(names, whole_donors)
    else:
        lines += ["# grafter, tokenizer: the Grafter and tokenizer this explorer was started with"]
    lines += ["", f"prompt = {json.dumps(text, ensure_ascii=False)}"]
    if tokenizer_matches:
        lines.append("input_ids = tokenizer(prompt, return_tensors='pt').input_ids")
    else:
        lines.append(f"input_ids = torch.tensor([{input_ids}])  # the prompt's tokens, as the explorer shows them")
    lines.append("grafts = [")
    lines += [f"    {graft_source(g)}," for g in grafts]
    lines += [
        "]",
        "probs = grafter.last_logits(input_ids.to(grafter.device), grafts=grafts).float().softmax(-1)[0]",
        "top = probs.topk(5)",
        "print([(tokenizer.decode([int(i)]), round(float(p), 4)) for p, i in zip(top.values, top.indices)])",
    ]
    return "\n".join(lines) + "\n"


def _loading_lines(names: ModelNames, whole_donors: bool = False) -> list[str]:
    """The models loaded the way weightgraft loads them: `load_model` takes a catalogue name (its
    converted folder), a folder or a cached hub id, where `from_pretrained('smollm2-135m')` would
    ask the hub for a repository of that name; a catalogue donor is its converted folder."""
    if whole_donors:
        return _whole_donor_lines(names)
    catalogue = any(is_pretrained_name(path) for path in names.donors.values())
    donor = lambda path: f"as_local({path!r})" if is_pretrained_name(path) else repr(path)  # noqa: E731
    return [
        "from weightgraft.experiments.models import load_model, load_tokenizer",
        *(["from weightgraft.pretrained import as_local"] if catalogue else []),
        "",
        f"recipient = load_model({names.recipient!r}, {names.device!r}, {names.dtype!r})",
        "grafter = Grafter(recipient, donors={",
        *(
            f"    {name!r}: {donor(path)},  # read lazily, in the recipient's dtype"
            for name, path in names.donors.items()
        ),
        "})",
        f"tokenizer = load_tokenizer({names.recipient!r})",
    ]


def _whole_donor_lines(names: ModelNames) -> list[str]:
    """As `_loading_lines`, each donor loaded whole with `load_model`."""
    return [
        "from weightgraft.experiments.models import load_model, load_tokenizer",
        "",
        f"recipient = load_model({names.recipient!r}, {names.device!r}, {names.dtype!r})",
        "grafter = Grafter(recipient, donors={  # loaded whole: a MoE checkpoint's experts are not read lazily",
        *(
            f"    {name!r}: load_model({path!r}, {names.device!r}, {names.dtype!r}),"
            for name, path in names.donors.items()
        ),
        "})",
        f"tokenizer = load_tokenizer({names.recipient!r})",
    ]


def graft_source(graft: Graft) -> str:
    donor = "" if graft.donor is None else f", donor={graft.donor!r}"
    donor += "" if graft.heads is None else f", heads={list(graft.heads)!r}"
    donor += "" if graft.experts is None else f", experts={list(graft.experts)!r}"
    return f"Graft(positions={list(graft.positions)!r}, layers={graft.layers!r}, components={list(graft.components)!r}{donor})"


class NotRoles(ValueError):
    """A graft's positions that no role expression selects on this prompt."""

    def __init__(self, positions: tuple[int, ...]):
        super().__init__(f"positions {list(positions)} are not a union of this prompt's roles (or its complement)")
        self.positions = positions


def graft_roles(
    grafts: Sequence[Graft], role_positions: dict[str, list[int]], num_tokens: int, has_roles: bool
) -> list[str]:
    """Each graft's positions as the role expression that selects them on this prompt (what a
    run config, or another prompt, understands); NotRoles for the first that has none."""
    expressions = _role_expressions(role_positions, num_tokens, has_roles)
    out = []
    for graft in grafts:
        positions = tuple(sorted(graft.positions))
        if positions not in expressions:
            raise NotRoles(positions)
        out.append(expressions[positions])
    return out


def condition_yaml(
    grafts: Sequence[Graft], role_positions: dict[str, list[int]], num_tokens: int, has_roles: bool
) -> tuple[str | None, str]:
    """The grafts as one condition of a run config (YAML), or None and the reason there is none."""
    if any(graft.experts is not None for graft in grafts):
        return None, (
            "a run config's grafts take heads or neurons, not single experts: use the Python form "
            "(Graft(..., experts=[...])), or graft the FFN column whole for a run config"
        )
    try:
        roles = graft_roles(grafts, role_positions, num_tokens, has_roles)
    except NotRoles as err:
        return None, (
            f"{err}: a run config names positions by role (FE, M, R, LT, other); use the Python form"
            + ("" if has_roles else ", or pick a dataset prompt, whose tokens have roles")
        )
    specs = [
        {"positions": role, "layers": graft.layers, "components": list(graft.components), "donor": graft.donor}
        | ({} if graft.heads is None else {"heads": list(graft.heads)})
        for role, graft in zip(roles, grafts)
    ]
    if not specs:
        return "- PRE  # nothing grafted: the recipient alone\n", ""
    condition = [{"name": CONDITION_NAME, "grafts": specs}]
    text = yaml.safe_dump(condition, sort_keys=False, default_flow_style=None, width=200)
    note = "donor names are the run config's model keys; positions by role apply to every prompt of a dataset"
    return text, note


def _role_expressions(role_positions: dict[str, list[int]], n: int, has_roles: bool) -> dict[tuple[int, ...], str]:
    """Position set -> the shortest role expression that selects it on this prompt."""
    atoms = ROLE_ATOMS if has_roles else ("LT",)
    sets: dict[str, set[int]] = {}
    for atom in atoms:
        try:
            sets[atom] = set(parse_positions(atom).evaluate(role_positions, n))
        except NotApplicable:
            continue
    found: dict[tuple[int, ...], str] = {tuple(range(n)): "ALL"}
    names = list(sets)
    for size in range(1, len(names) + 1):
        for combo in combinations(names, size):
            chosen = set().union(*(sets[a] for a in combo))
            text = "+".join(combo)
            found.setdefault(tuple(sorted(chosen)), text)
            complement = tuple(sorted(set(range(n)) - chosen))
            if complement:
                found.setdefault(complement, f"{text}^C" if size == 1 else f"({text})^C")
    return found
