"""A clock that stands still until the test moves it: pass it where code takes a ``clock()`` callable."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

#: What the clock reads: whole numbers (epoch milliseconds) or float seconds (a monotonic clock).
N = TypeVar("N", int, float)


@dataclass
class ManualClock(Generic[N]):
    """Reads ``now``; set it, or :meth:`advance` it."""

    now: N

    def __call__(self) -> N:
        return self.now

    def advance(self, by: N) -> None:
        self.now += by
