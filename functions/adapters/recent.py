"""What a container remembers having written: a bounded set, the least recently used forgotten first.

Ingest writes a mark, a marker or an index item once per container and remembers it here; one
forgotten is written again, which costs a write unit, never correctness.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Recent(Generic[K]):
    """At most ``entries`` keys. Not thread-safe: its owner holds its own lock around it."""

    __slots__ = ("_entries", "_keys")

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._keys: OrderedDict[K, None] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def touch(self, key: K) -> None:
        """Mark ``key``, if held, as just used."""
        if key in self._keys:
            self._keys.move_to_end(key)

    def add(self, key: K) -> None:
        """Hold ``key`` as just used, forgetting the least recently used past ``entries``."""
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self._entries:
            self._keys.popitem(last=False)
