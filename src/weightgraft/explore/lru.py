"""A bounded memo, least recently used out first: the explorer's caches of answers that depend only
on the models (fixed for a session) and on the request's key."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Value = TypeVar("Value")


class LRU(Generic[Value]):
    """At most `capacity` values by key; `get_or(key, compute)` computes a missing one once."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._values: OrderedDict[Hashable, Value] = OrderedDict()

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values

    def get(self, key: Hashable) -> Value | None:
        if key not in self._values:
            return None
        self._values.move_to_end(key)
        return self._values[key]

    def put(self, key: Hashable, value: Value) -> Value:
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self.capacity:
            self._values.popitem(last=False)
        return value

    def get_or(self, key: Hashable, compute: Callable[[], Value]) -> Value:
        """The value of `key`, computed (and kept) when missing."""
        known = self.get(key)
        return known if known is not None else self.put(key, compute())
