"""The rotator's plug point: a function run on a schedule of simulated time."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from keydesign import parse_timestamp
from local_runtime.functions import FunctionSpec
from local_runtime.scheduler import SimulatedClock, now_event
from tests.integration.local_runtime import recordings

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("clean_recordings")]


def test_a_scheduled_function_runs_every_simulated_period_until_the_system_stops(running: Any) -> None:
    # Given a function scheduled hourly on a clock 10,000 times faster than real time (a run every 360 ms)
    system = running()
    function = system.functions.load(
        FunctionSpec(name="rotator", handler="tests.integration.local_runtime.scheduled_recorder.handler")
    )
    clock = SimulatedClock(speed=10_000, start_ms=1_795_330_800_000)
    schedule = system.schedule(function, every_s=3600, clock=clock, event=now_event)
    # When three runs have happened
    assert recordings.THREE_RUNS.wait(30)
    system.stop()
    # Then each got the simulated time, about an hour apart (a run the loaded machine starts late
    # shortens the next gap by as much: half an hour of slack is 180 ms of real time), and the
    # schedule stopped with the system
    times = [parse_timestamp(e["now"]) for e in recordings.SCHEDULED[:3]]
    assert times[0] >= 1_795_330_800_000
    assert all(b - a >= 1_800_000 for a, b in itertools.pairwise(times))
    assert schedule.runs >= 3 and schedule.failures == 0
    assert not [t for t in threading.enumerate() if t.name == "schedule-rotator"]
