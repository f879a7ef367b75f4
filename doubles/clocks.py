"""A clock that stands still until the test moves it: pass it where code takes a ``clock()`` callable,
and its :meth:`~ManualClock.sleep` where code takes a ``sleep`` one (a wait then takes no real time)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Generic, TypeVar

#: What the clock reads: whole numbers (epoch milliseconds) or float seconds (a monotonic clock).
N = TypeVar("N", int, float)


@dataclass
class ManualClock(Generic[N]):
    """Reads ``now``; set it, :meth:`advance` it, or :meth:`sleep` on it. Safe to share between threads."""

    now: N
    #: Every wait :meth:`sleep` was asked for, in order.
    sleeps: list[N] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def __call__(self) -> N:
        return self.now

    def advance(self, by: N) -> None:
        with self._lock:
            self.now += by

    def sleep(self, by: N) -> None:
        """Advances the clock by ``by`` at once, and records the wait."""
        with self._lock:
            self.sleeps.append(by)
            self.now += by
