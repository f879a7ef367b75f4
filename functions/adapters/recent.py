"""What a container remembers having written (a mark, a record): at most so many keys, the least
recently used forgotten first. One forgotten is written again, which costs a write unit, never correctness."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


class Recent(OrderedDict[K, None]):
    """Not thread-safe: its owner holds its own lock around it."""

    def __init__(self, entries: int) -> None:
        super().__init__()
        self._entries = entries

    def touch(self, key: K) -> None:
        """Mark ``key``, if held, as just used."""
        if key in self:
            self.move_to_end(key)

    def add(self, key: K) -> None:
        """Hold ``key`` as just used, forgetting the least recently used past the bound."""
        self[key] = None
        self.move_to_end(key)
        if len(self) > self._entries:
            self.popitem(last=False)
