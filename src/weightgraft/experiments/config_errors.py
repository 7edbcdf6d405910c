"""A run config's validation errors in the user's words: pydantic's errors for a config become
one line naming the file, the field path and the fix, leaving out the noise of union members
that did not apply."""

from __future__ import annotations

from pydantic import ValidationError

_MAPPING_EXAMPLES = {"models": "{pre: gpt2, sft: ./ckpt/relation}", "datasets": "{relation: ./data/relation}"}


_TYPE_NAMES = {"str", "int", "float", "bool", "list", "dict", "none", "tuple", "set"}


def _is_branch(part: object) -> bool:
    """A step of an error's location that names a union member (`str`, `literal['auto']`,
    `function-after[..., ConditionSpec]`), not a field of the user's config."""
    return isinstance(part, str) and (part in _TYPE_NAMES or "[" in part)


def _relevant_errors(errors: list[dict]) -> list[dict]:
    """Leave out a union member's plain type mismatch ("Input should be a valid string") where
    another member of the same union took the input and found the real problem further in: that
    one names the field the user has to fix."""
    keep = []
    for item in errors:
        loc = list(item["loc"])
        at = next((i for i, part in enumerate(loc) if _is_branch(part)), None)
        mismatch = item["type"].endswith("_type") or item["type"] in ("literal_error", "is_instance_of")
        if at is not None and mismatch and len(loc) == at + 1:
            prefix = loc[:at]
            if any(
                list(other["loc"][:at]) == prefix and len(other["loc"]) > at and other["loc"][at] != loc[at]
                for other in errors
            ):
                continue
        keep.append(item)
    return keep or errors


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line: the first problem, naming the source (file) and its field path, and how many
    more there are (each is named in turn as the config is fixed)."""
    lines = []
    for item in _relevant_errors(err.errors()):
        loc = [str(p) for p in item["loc"] if p not in ("custom", "preset", "localize") and not _is_branch(p)]
        where = ".".join(loc) or "config"
        if item["type"] == "extra_forbidden":
            parent = ".".join(loc[:-1]) or "top level"
            lines.append(f"unknown field {loc[-1]!r} at {parent}; remove it or fix its spelling")
        elif item["type"] == "dict_type":
            example = _MAPPING_EXAMPLES.get(where, "{name: value}")
            lines.append(
                f"{where}: expected a mapping of `name: value` entries, got "
                f"{item.get('input')!r}; write e.g. `{where}: {example}`"
            )
        elif item["type"] == "missing":
            lines.append(f"{where}: required field is missing; add it")
        else:
            msg = item["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {msg}")
    head = f"invalid run config {source}: " if source else "invalid run config: "
    more = f" (and {len(lines) - 1} more problem(s), named once this one is fixed)" if len(lines) > 1 else ""
    return head + lines[0] + more
