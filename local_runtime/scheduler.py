"""A schedule for a function (the rotator's EventBridge Scheduler rule), with a speed-up clock.

:class:`SimulatedClock` runs ``speed`` times faster than the wall clock from a
given start, so a demo can see an hourly rotation every few seconds, and
:class:`ReplayClock` replays a schedule from a start in the past, run after
run, until it meets the wall clock;
:class:`Schedule` invokes a function every ``every_s`` *simulated* seconds with
an event made from the simulated time (for the rotator: ``{"now": ...}``, which
it honours with ``ALLOW_NOW_OVERRIDE=true``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from keydesign import format_ts
from local_runtime.functions import FunctionError

_log = logging.getLogger(__name__)
_HOUR_MS = 3_600_000


class SimulatedClock:
    """Epoch milliseconds that advance ``speed`` times as fast as real time from ``start_ms``."""

    def __init__(
        self,
        *,
        speed: float = 1.0,
        start_ms: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if speed <= 0:
            raise ValueError(f"clock speed must be positive, got {speed}")
        self.speed = speed
        self._monotonic = monotonic
        self._origin = monotonic()
        self._start_ms = int(time.time() * 1000) if start_ms is None else start_ms

    def now_ms(self) -> int:
        return self._start_ms + int((self._monotonic() - self._origin) * 1000 * self.speed)

    def real_seconds_until(self, target_ms: int) -> float:
        """Real seconds until the clock shows ``target_ms`` (0 once it has)."""
        return max(0.0, (target_ms - self.now_ms()) / 1000 / self.speed)


class ReplayClock:
    """Time replayed from a start in the past, one scheduled run at a time, up to the wall clock.

    It stands still while a run works and moves on to the next due time once the run is over and
    ``pace_s`` of real time has passed since it last moved, so every run of the replayed schedule
    happens, however long each takes. Before it crosses into a new hour it also waits for
    ``settle()`` (the local system waits there for ingest to take what was published so far, as it
    would within seconds in real time), which bounds how far ingest's work lags the replayed time.
    Once it reaches the wall clock it *is* the wall clock, and the schedule waits real periods. A
    demo replays hours of a rotator's life in seconds this way, ingest running on the same clock
    (:class:`local_runtime.LocalSystem`).
    """

    def __init__(
        self,
        *,
        start_ms: int,
        pace_s: float = 0.0,
        settle: Callable[[], object] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._settle = settle
        if pace_s < 0:
            raise ValueError(f"a replay's pace must be 0 or more, got {pace_s}")
        self.pace_s = pace_s
        self._now_ms = start_ms
        self._monotonic = monotonic
        self._wall_ms = wall_ms
        self._moved_at = monotonic()
        self._caught_up = False
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            wall = self._wall_ms()
            if self._caught_up or self._now_ms >= wall:
                self._caught_up = True
                return wall
            return self._now_ms

    def caught_up(self) -> bool:
        self.now_ms()
        return self._caught_up

    def real_seconds_until(self, target_ms: int) -> float:
        """Real seconds until the clock shows ``target_ms``. While replaying, the clock jumps to
        ``target_ms`` as soon as ``pace_s`` has passed since it last moved (0 is returned then)."""
        if self.caught_up():
            return max(0.0, (target_ms - self._wall_ms()) / 1000)
        with self._lock:
            if target_ms <= self._now_ms:
                return 0.0
            left = self._moved_at + self.pace_s - self._monotonic()
        if left > 0:
            return left
        if self._settle is not None and target_ms // _HOUR_MS != self._now_ms // _HOUR_MS:
            self._settle()
        with self._lock:
            self._now_ms = max(self._now_ms, target_ms)
            self._moved_at = self._monotonic()
        return 0.0 if not self.caught_up() else max(0.0, (target_ms - self._wall_ms()) / 1000)


def now_event(now_ms: int) -> dict[str, Any]:
    """The rotator's event for a run at ``now_ms`` (it accepts ``now`` when ALLOW_NOW_OVERRIDE=true)."""
    return {"now": format_ts(now_ms)}


def empty_event(_now_ms: int) -> dict[str, Any]:
    """EventBridge Scheduler's default payload."""
    return {}


@dataclass(eq=False)
class Schedule:
    """Invokes ``invoke(event)`` at once and then every ``every_s`` simulated seconds until stopped."""

    name: str
    invoke: Callable[[Any], Any]
    _: KW_ONLY
    every_s: float
    clock: SimulatedClock | ReplayClock = field(default_factory=SimulatedClock)
    event: Callable[[int], dict[str, Any]] = empty_event
    on_result: Callable[[int, Any], None] | None = None
    runs: int = field(default=0, init=False)
    failures: int = field(default=0, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def __post_init__(self) -> None:
        if self.every_s <= 0:
            raise ValueError(f"a schedule's period must be positive, got {self.every_s}")

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
            result = self.invoke(self.event(now_ms))
        except FunctionError as exc:
            with self._lock:
                self.runs += 1
                self.failures += 1
            _log.warning("schedule %s: run at %s failed: %s", self.name, format_ts(now_ms), exc)
            return None
        with self._lock:
            self.runs += 1
        if self.on_result is not None:
            self.on_result(now_ms, result)
        return result

    def _run(self, run_now: bool) -> None:
        # Due times are simulated: a catch-up clock changes speed when it reaches the wall clock.
        every_ms = int(self.every_s * 1000)
        due = self.clock.now_ms() + (0 if run_now else every_ms)
        while not self._wait_until(due):
            self.run_once()
            due += every_ms
            # A run longer than the period skips the runs it overlapped, as a rate schedule would.
            now = self.clock.now_ms()
            while due <= now:
                due += every_ms

    def _wait_until(self, due_ms: int) -> bool:
        """Wait until the clock shows ``due_ms``; True if stopped first."""
        while (remaining := self.clock.real_seconds_until(due_ms)) > 0:
            if self._stop.wait(min(remaining, 1.0)):
                return True
        return self._stop.is_set()
