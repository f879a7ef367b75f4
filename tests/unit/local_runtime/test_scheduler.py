"""A schedule on a speed-up clock."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest

from doubles.clocks import ManualClock
from keydesign import parse_timestamp
from local_runtime.functions import FunctionError
from local_runtime.scheduler import ReplayClock, Schedule, SimulatedClock, empty_event, now_event


def test_the_simulated_clock_runs_speed_times_faster() -> None:
    ticks = ManualClock(0.0)
    clock = SimulatedClock(speed=3600, start_ms=1_795_330_800_000, monotonic=ticks)
    ticks.now = 2.0  # two real seconds
    assert clock.now_ms() == 1_795_330_800_000 + 2 * 3600 * 1000
    assert clock.real_seconds_until(1_795_330_800_000 + 2 * 3600 * 1000 + 3600 * 1000) == 1.0
    with pytest.raises(ValueError):
        SimulatedClock(speed=0)


def test_a_run_passes_the_simulated_time_in_the_event() -> None:
    ticks = ManualClock(0.0)
    clock = SimulatedClock(speed=60, start_ms=1_795_330_800_000, monotonic=ticks)
    events: list[Any] = []
    schedule = Schedule(
        "rotator", lambda e: events.append(e) or {"ok": True}, every_s=3600, clock=clock, event=now_event
    )
    ticks.now = 10
    assert schedule.run_once() == {"ok": True}
    assert parse_timestamp(events[0]["now"]) == 1_795_330_800_000 + 600_000
    assert empty_event(0) == {}


def test_a_failed_run_is_counted_and_the_schedule_goes_on() -> None:
    def fail(_event: Any) -> Any:
        raise FunctionError("no")

    schedule = Schedule("rotator", fail, every_s=60)
    assert schedule.run_once() is None
    assert (schedule.runs, schedule.failures) == (1, 1)


def test_the_schedule_fires_every_period_of_simulated_time_until_stopped() -> None:
    # Given an hourly schedule on a clock 20,000 times faster (one run every 180 ms of real time)
    enough = threading.Event()
    seen: list[int] = []

    def record(now_ms: int, _result: Any) -> None:
        seen.append(now_ms)
        if len(seen) >= 4:
            enough.set()

    schedule = Schedule("rotator", lambda _e: None, every_s=3600, clock=SimulatedClock(speed=20_000), on_result=record)
    schedule.start()
    try:
        assert enough.wait(10)
    finally:
        schedule.stop()
    # Then runs are about an hour of simulated time apart (a run the loaded machine starts late
    # shortens the next gap by as much: half an hour of slack is 90 ms of real time), and the
    # schedule's thread is gone after stop
    gaps = [b - a for a, b in itertools.pairwise(seen)]
    assert all(gap >= 1_800_000 for gap in gaps[:3])
    assert not [t for t in threading.enumerate() if t.name == "schedule-rotator"]


def test_a_period_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Schedule("x", lambda _e: None, every_s=0)


def test_a_schedule_started_after_a_run_waits_one_period_first() -> None:
    # Given a schedule whose caller has just run it, on a clock where a period is 0.2 s of real time
    ran = threading.Event()
    schedule = Schedule("rotator", lambda _e: ran.set(), every_s=3600, clock=SimulatedClock(speed=18_000))
    schedule.start(run_now=False)
    try:
        # Then nothing runs at once, and the first run comes a period later
        assert not ran.wait(0.1)
        assert ran.wait(5)
    finally:
        schedule.stop()
    assert schedule.runs >= 1


def test_a_replay_clock_moves_run_by_run_and_then_keeps_the_wall_clock() -> None:
    # Given a clock replaying from six hours in the past, at least half a real second per step
    ticks = ManualClock(0.0)
    wall = [1_795_330_800_000]
    start = wall[0] - 6 * 3_600_000
    clock = ReplayClock(start_ms=start, pace_s=0.5, monotonic=ticks, wall_ms=lambda: wall[0])
    # It stands still, however much real time passes, until a schedule asks for its next due time
    ticks.now, wall[0] = 3.0, wall[0] + 3_000
    assert clock.now_ms() == start and not clock.caught_up()
    assert clock.real_seconds_until(start + 900_000) == 0.0
    assert clock.now_ms() == start + 900_000
    # And the next step waits for the pace
    assert clock.real_seconds_until(start + 1_800_000) == 0.5
    ticks.now = 3.5
    assert clock.real_seconds_until(start + 1_800_000) == 0.0 and clock.now_ms() == start + 1_800_000
    # Then a step past the wall clock makes it the wall clock: a quarter of an hour is real time again
    ticks.now = 4.0
    assert clock.real_seconds_until(wall[0] + 60_000) == 60.0
    assert clock.caught_up() and clock.now_ms() == wall[0]


def test_a_schedule_on_a_replay_clock_runs_every_period_of_the_past_then_waits_real_ones() -> None:
    # Given a quarter-hourly schedule replaying three hours
    seen: list[int] = []
    start = int(time.time() * 1000) - 3 * 3_600_000
    clock = ReplayClock(start_ms=start)
    schedule = Schedule("rotator", lambda _e: None, every_s=900, clock=clock, on_result=lambda t, _r: seen.append(t))
    schedule.start()
    try:
        # When the clock has caught up
        assert _eventually(clock.caught_up, 10)
        time.sleep(0.2)
    finally:
        schedule.stop()
    # Then every quarter hour of the past had its run, exactly, and none ran ahead of the wall clock
    assert seen[:12] == [start + n * 900_000 for n in range(12)]
    assert len(seen) in (12, 13) and seen[-1] <= time.time() * 1000


def _eventually(condition: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return False


def test_a_replay_clock_settles_before_it_enters_each_hour() -> None:
    # Given a replay clock whose system has something to take before each new hour
    settled: list[int] = []
    clock = ReplayClock(start_ms=0, settle=lambda: settled.append(clock.now_ms()), wall_ms=lambda: 10**13)
    # When a schedule steps it through five quarter hours
    for n in range(1, 6):
        assert clock.real_seconds_until(n * 900_000) == 0.0
    # Then it settled once, just before it entered the second hour, and moved on after
    assert settled == [2_700_000] and clock.now_ms() == 4_500_000
