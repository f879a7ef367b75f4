"""A schedule for a function (the rotator's EventBridge Scheduler rule), with a speed-up clock.

:class:`SimulatedClock` runs ``speed`` times faster than the wall clock from a
given start, so a demo can see an hourly rotation every few seconds;
:class:`Schedule` invokes a function every ``every_s`` *simulated* seconds with
an event made from the simulated time (for the rotator: ``{"now": ...}``, which
it honours with ``ALLOW_NOW_OVERRIDE=true``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from keydesign import format_ts
from local_runtime.functions import FunctionError

_log = logging.getLogger(__name__)


class SimulatedClock:
    """Epoch milliseconds that advance ``speed`` times as fast as real time from ``start_ms``."""

    def __init__(
        self,
        *,
        speed: float = 1.0,
        start_ms: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if speed <= 0:
            raise ValueError(f"clock speed must be positive, got {speed}")
        self.speed = speed
        self._monotonic = monotonic
        self._origin = monotonic()
        self._start_ms = wall_ms() if start_ms is None else start_ms

    def now_ms(self) -> int:
        return self._start_ms + int((self._monotonic() - self._origin) * 1000 * self.speed)

    def real_seconds(self, simulated_s: float) -> float:
        return simulated_s / self.speed


def now_event(now_ms: int) -> dict[str, Any]:
    """The rotator's event for a run at ``now_ms`` (it accepts ``now`` when ALLOW_NOW_OVERRIDE=true)."""
    return {"now": format_ts(now_ms)}


def empty_event(_now_ms: int) -> dict[str, Any]:
    """EventBridge Scheduler's default payload."""
    return {}


class Schedule:
    """Invokes ``invoke(event)`` at once and then every ``every_s`` simulated seconds until stopped."""

    def __init__(
        self,
        name: str,
        invoke: Callable[[Any], Any],
        *,
        every_s: float,
        clock: SimulatedClock | None = None,
        event: Callable[[int], dict[str, Any]] = empty_event,
        on_result: Callable[[int, Any], None] | None = None,
    ) -> None:
        if every_s <= 0:
            raise ValueError(f"a schedule's period must be positive, got {every_s}")
        self.name = name
        self._invoke = invoke
        self._every_s = every_s
        self.clock = clock or SimulatedClock()
        self._event = event
        self._on_result = on_result
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.runs = 0
        self.failures = 0
        #: The result of the latest run that did not fail.
        self.last_result: Any = None

    def start(self, *, run_now: bool = True) -> None:
        """Start the schedule; ``run_now=False`` when the caller has just run it (the next run is one
        period from now)."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, args=(run_now,), name=f"schedule-{self.name}", daemon=True
            )
            self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def run_once(self) -> Any:
        """One scheduled run now (simulated time); the result, or None when the function failed."""
        now_ms = self.clock.now_ms()
        try:
            result = self._invoke(self._event(now_ms))
        except FunctionError as exc:
            with self._lock:
                self.runs += 1
                self.failures += 1
            _log.warning("schedule %s: run at %s failed: %s", self.name, format_ts(now_ms), exc)
            return None
        with self._lock:
            self.runs += 1
            self.last_result = result
        if self._on_result is not None:
            self._on_result(now_ms, result)
        return result

    def _run(self, run_now: bool) -> None:
        interval = self.clock.real_seconds(self._every_s)
        next_at = time.monotonic()
        if not run_now:
            next_at += interval
            if self._stop.wait(interval):
                return
        while not self._stop.is_set():
            self.run_once()
            next_at += interval
            # A run longer than the period skips the runs it overlapped, as a rate schedule would.
            while next_at <= time.monotonic():
                next_at += interval
            if self._stop.wait(next_at - time.monotonic()):
                return
