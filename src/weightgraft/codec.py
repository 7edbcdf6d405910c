"""One way to turn typed state into JSON bodies and back: pydantic's `TypeAdapter` over the
dataclasses themselves, so that no class spells its fields out a second time in a serialiser.

The body's keys are the class's fields in declaration order. A class states its exceptions on
the field, where a reader looks for them: `Annotated[T, OMIT_NONE]` or `Annotated[T, OMIT_EMPTY]`
for a value written only when set, `Annotated[T, COMPUTED]` for a field never written. Reading fills missing keys with the
fields' defaults (older files) and turns JSON lists back into the declared tuples.

Values typed `Any` or bare `dict` are written as JSON mode writes them: a float NaN among them
would come out as null (the state files hold none; typed float fields keep NaN).
"""

from __future__ import annotations

from functools import cache
from typing import Any, TypeVar

from pydantic import Field, TypeAdapter

T = TypeVar("T")


def _is_empty(value: object) -> bool:
    return not value


OMIT_NONE = Field(exclude_if=lambda value: value is None)
"""A field written only when set (not None)."""

OMIT_EMPTY = Field(exclude_if=_is_empty)
"""A field written only when non-empty ("" / {} / 0 / None are left out of the body)."""

COMPUTED = Field(exclude=True)
"""A field derived from the others: never written, recomputed when read."""


@cache
def _adapter(cls: type) -> TypeAdapter:
    return TypeAdapter(cls)


def dump(obj: Any) -> dict:
    """The JSON body of a dataclass instance: fields in declaration order, the omitted ones left out."""
    return _adapter(type(obj)).dump_python(obj, mode="json")


def load(cls: type[T], body: dict) -> T:
    """An instance of `cls` from its JSON body (the inverse of `dump`; missing keys: defaults)."""
    return _adapter(cls).validate_python(body)
