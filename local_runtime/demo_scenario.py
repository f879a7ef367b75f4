"""The demo's scenario: the traffic of its story, published through the producer library.

Steps 0 to 3 of :mod:`local_runtime.demo`: the rotator's replayed history and
a few readings of a dropped hour, the phase before the split (plus readings
that break a rule and records that are not JSON), the wait for the detector's
split while the other sensors trickle, and the phase after it. Every reading
is recorded in the ledger as it is published, and each phase's span; the
accounting (:mod:`local_runtime.demo_accounting`) compares them with what the
system stored.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from keydesign import format_ts
from local_runtime.demo_accounting import Observer, Say
from local_runtime.demo_report import HOT_SENSOR, Phase, StoredMap
from local_runtime.scheduler import ReplayClock
from local_runtime.system import LocalSystem
from producer import Packer, Publisher, PublishSummary, Workload, generate, kinesis_client, publish

if TYPE_CHECKING:
    from local_runtime.demo import DemoOptions

T = TypeVar("T")


class Scenario:
    """Publishes the story and records it: the ledger of readings, the phases, the producer's summaries."""

    def __init__(self, system: LocalSystem, options: DemoOptions, observer: Observer, say: Say) -> None:
        self.system = system
        self.options = options
        self.observer = observer
        self.say = say
        self.endpoints = system.endpoints
        self.ledger: list[dict[str, Any]] = []
        self.phases: list[Phase] = []
        self.summaries: list[PublishSummary] = []
        self.extra_published = 0
        self.refused: dict[str, Any] = {}
        self.caught_up_after_s: float | None = None
        self.timings: dict[str, float] = {}
        self._lock = threading.Lock()

    # -- step 0: the rotator's history ---------------------------------------------------------------

    def history(self, clock: ReplayClock) -> None:
        """The rotator replays its history on the replay clock while readings stamped with that
        clock land in each hour's table; then readings of a dropped hour, which ingest refuses."""
        o, say = self.options, self.say
        mark = time.monotonic()
        every = self.system.config.rotation_interval_minutes()
        say(
            f"rotation: replaying {o.history_s / 3600:g} h of {self.system.config.table_period} tables, the "
            f"rotator every {every} min of that time (a run at least every {o.history_pace_s:g} s), "
            f"{o.history_rate:g} readings/s stamped with the replayed clock"
        )
        stop = threading.Event()
        history = InThread(lambda: self._publish_history(clock, stop, spread_ms=every * 60_000))
        try:
            wait_for(clock.caught_up, o.history_s / (every * 60) * 10 + 120, interval_s=0.2)
        finally:
            stop.set()
            history.result(60)
        self.caught_up_after_s = time.monotonic() - mark
        self.timings["rotation_history"] = self.caught_up_after_s
        runs = list(self.system.rotations)
        dropped = [t for run in runs for t in (run.get("summary") or {}).get("deleted", [])]
        say(
            f"  caught up with the wall clock after {self.caught_up_after_s:.0f} s: {len(runs)} rotator runs; "
            f"tables now {', '.join(self.system.readings_tables())}; dropped {', '.join(dropped) or 'none'}"
        )
        if dropped:
            self._publish_for_dropped(dropped[0], runs)

    def _publish_history(self, clock: ReplayClock, stop: threading.Event, *, spread_ms: int) -> None:
        """A trickle of readings stamped with the replayed clock, less up to ``spread_ms`` so they
        spread over each step (never ahead of it: ingest would refuse a reading from its future),
        sent every quarter second: the replay moves on only once ingest has taken what was sent."""
        o = self.options
        publisher = self._publisher()
        seen = _PhaseLedger("rotation history (replayed time)")
        rng = random.Random(o.seed + 3)
        per_send = max(1, round(o.history_rate / 4))
        n = 0
        while not stop.is_set() and not clock.caught_up():
            chunk = []
            for _ in range(per_send):
                reading = _reading(rng, o.sensors, f"history-{n}", clock.now_ms(), spread_ms=spread_ms)
                chunk.append((0.0, reading))
                seen.add(reading)
                n += 1
            publish(chunk, publisher, Packer())  # sent now: the last batch is drained at the end
            stop.wait(0.25)
        self._record(publisher.summary, seen)

    def _publish_for_dropped(self, table: str, runs: list[dict[str, Any]]) -> None:
        """Readings of the hour whose table the rotator dropped: ingest must refuse each, with its reason."""
        layout = self.system.config.layout()
        period = layout.table_period
        assert period is not None  # noqa: S101 - only with a table period
        low = min(int(r["now_ms"]) for r in runs) - self.system.config.retention_ms - 2 * period.nominal_ms
        start = next((s for s in period.starts(low, now_ms()) if layout.table_for(s) == table), None)
        if start is None:
            return
        ids = [f"dropped-period-{n}" for n in range(self.options.refused_readings)]
        readings = [
            {"entity_id": "sensor-000001", "event_id": i, "timestamp": start + 1_800_000 + n, "measures": {"temp": 1.0}}
            for n, i in enumerate(ids)
        ]
        summary = publish([(0.0, r) for r in readings], self._publisher(), Packer(), validate=False)
        self._record(summary)
        self.refused = {"table": table, "event_ids": ids}
        self.say(f"  published {summary.readings_sent} readings of {format_ts(start)}, whose table {table} is gone")

    # -- steps 1 to 3: the hot sensor, its split, and after --------------------------------------------

    def before_the_split(self) -> tuple[Workload, StoredMap | None]:
        """Phase 1, in real time, and the shard map as ingest first stores it (before any change)."""
        o = self.options
        mark = time.monotonic()
        first = Workload(
            entities=o.sensors,
            rate=o.base_rate,
            hot=((HOT_SENSOR, o.hot_rate),),
            duration_s=o.hot_phase_s,
            seed=o.seed,
            start_ms=now_ms(),
        )
        self.say(
            f"phase 1 (before the split): {first.total:,} readings over {o.hot_phase_s:g} s in real time: "
            f"{o.sensors:,} sensors at {o.base_rate:,.0f}/s in all, {HOT_SENSOR} at {o.hot_rate:,.0f}/s"
        )
        publisher = InThread(lambda: self.publish("before the split", generate(first)))
        map_before = wait_for(self.observer.read_map, o.hot_phase_s + 60)
        publisher.result(o.hot_phase_s + 120)
        self._publish_rule_breakers()
        self.timings["phase_1"] = time.monotonic() - mark
        return first, map_before

    def await_split(self) -> StoredMap | None:
        """The map once it splits the hot sensor, then the wall clock past the split's boundary;
        the other sensors keep reporting meanwhile (a window is judged once the stream passed it)."""
        o, say = self.options, self.say
        mark = time.monotonic()
        trickle = _Trickle(self, o.trickle_rate, o.sensors, o.seed + 2)
        say(f"waiting for the hot-key detector to split {HOT_SENSOR} (the others trickle at {o.trickle_rate:g}/s)")
        try:
            split = wait_for(
                self.observer.split_scheduled,
                o.split_timeout_s,
                on_tick=lambda waited: say(f"  {waited:.0f} s: {self.observer.detector_progress()}"),
                tick_s=15,
            )
            if split is None:
                say(f"no split of {HOT_SENSOR} within {o.split_timeout_s:.0f} s")
                return None
            boundary = hot_boundary(split)
            self.timings["detection"] = time.monotonic() - mark
            shards = split.shard_map.entity_history[HOT_SENSOR][-1].shards
            say(
                f"split scheduled after {self.timings['detection']:.0f} s: {HOT_SENSOR} -> {shards} sub-shards from "
                f"{format_ts(boundary)}; waiting {max(0.0, (boundary - now_ms()) / 1000):.0f} s for the wall clock "
                "to pass it"
            )
            waited = time.monotonic()
            wait_for(lambda: now_ms() >= boundary + 500 or None, (boundary - now_ms()) / 1000 + 30)
            self.timings["boundary_wait"] = time.monotonic() - waited
            return split
        finally:
            trickle.stop()
            self.timings["split"] = time.monotonic() - mark

    def after_the_split(self, first: Workload) -> None:
        """Phase 2: the same traffic, every event time after the boundary (the clock has passed it)."""
        o = self.options
        mark = time.monotonic()
        second = replace(first, duration_s=o.split_phase_s, seed=o.seed + 1, start_ms=now_ms())
        self.say(f"phase 2 (after the split): {second.total:,} readings over {o.split_phase_s:g} s in real time")
        self.publish("after the split", generate(second))
        self.timings["phase_2"] = time.monotonic() - mark

    # -- publishing -------------------------------------------------------------------------------------

    def publish(self, name: str, items: Iterable[tuple[float, dict[str, Any]]], *, quiet: bool = False) -> None:
        """Publish ``items`` paced in real time, recording each reading in the ledger."""
        seen = _PhaseLedger(name)

        def recorded() -> Iterator[tuple[float, dict[str, Any]]]:
            for offset, reading in items:
                seen.add(reading)
                yield offset, reading

        def note(summary: PublishSummary, final: bool) -> None:
            if not quiet and (final or summary.elapsed_s - seen.noted_s >= 5):
                seen.noted_s = summary.elapsed_s
                self.say(f"  {name}: sent {summary.readings_sent:,} readings in {summary.records_sent:,} records")

        self._record(publish(recorded(), self._publisher(), Packer(), pace=True, progress=note), seen)

    def _publish_rule_breakers(self) -> None:
        kinesis = kinesis_client(endpoint_url=self.endpoints.endpoint_url, region=self.endpoints.region)
        items = [(0.0, reading) for reading in invalid_readings(self.options.invalid_readings, now_ms())]
        summary = publish(items, Publisher(kinesis, self.endpoints.stream_name), Packer(), validate=False)
        garbage = _publish_garbage(kinesis, self.endpoints.stream_name, self.options.garbage_records)
        self._record(summary)
        with self._lock:
            self.extra_published += garbage
        self.say(f"  and {summary.readings_sent} readings that break a rule, {garbage} records that are not JSON")

    def _publisher(self) -> Publisher:
        e = self.endpoints
        return Publisher(kinesis_client(endpoint_url=e.endpoint_url, region=e.region), e.stream_name)

    def _record(self, summary: PublishSummary, seen: _PhaseLedger | None = None) -> None:
        with self._lock:
            self.summaries.append(summary)
            if seen is not None and seen.readings:
                self.ledger.extend(seen.readings)
                self.phases.append(seen.phase())


def invalid_readings(count: int, now_ms: int) -> list[dict[str, Any]]:
    """Readings that each break one rule, the kinds in turn."""
    kinds: list[Callable[[int], dict[str, Any]]] = [
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms, "measures": {"temp": "warm"}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "measures": {"temp": 1.0}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms + 86_400_000, "measures": {"temp": 1.0}},
        lambda n: {"entity_id": "", "timestamp": now_ms, "measures": {"temp": 1.0}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms, "measures": {"temp": 1.0}, "colour": "red"},
    ]
    return [kinds[n % len(kinds)](n) for n in range(count)]


def _publish_garbage(kinesis: Any, stream: str, count: int) -> int:
    """Records that are not JSON: each is one unit ingest must reject."""
    if count <= 0:
        return 0
    records = [{"Data": f"not json {n} \x00".encode(), "PartitionKey": f"garbage-{n}"} for n in range(count)]
    response = kinesis.put_records(StreamName=stream, Records=records)
    return count - int(response.get("FailedRecordCount", 0))


def _reading(rng: random.Random, sensors: int, event_id: str, at_ms: int, *, spread_ms: int = 0) -> dict[str, Any]:
    """One of the ordinary sensors' readings, at ``at_ms`` less up to ``spread_ms``."""
    return {
        "entity_id": f"sensor-{rng.randrange(1, sensors + 1):06d}",
        "event_id": event_id,
        "timestamp": at_ms - rng.randrange(spread_ms) if spread_ms else at_ms,
        "measures": {"temp": round(rng.uniform(15, 30), 2), "rh": round(rng.uniform(30, 60), 1)},
    }


def hot_boundary(stored: StoredMap) -> int:
    return stored.shard_map.entity_history[HOT_SENSOR][-1].effective_from_ms


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_for(
    condition: Callable[[], T | None],
    timeout_s: float,
    *,
    interval_s: float = 0.5,
    on_tick: Callable[[float], None] | None = None,
    tick_s: float = 10.0,
) -> T | None:
    """``condition()`` once it returns something other than None (or False), polled every ``interval_s``;
    None after ``timeout_s``. ``on_tick(waited_s)`` every ``tick_s`` while waiting."""
    started = time.monotonic()
    last_tick = started
    pause = threading.Event()
    while True:
        value = condition()
        if value is not None and value is not False:
            return value
        now = time.monotonic()
        if now - started >= timeout_s:
            return None
        if on_tick is not None and now - last_tick >= tick_s:
            last_tick = now
            on_tick(now - started)
        pause.wait(min(interval_s, max(0.0, timeout_s - (now - started))))


class InThread:
    """Runs ``target`` in a thread; :meth:`result` joins it and re-raises what it raised."""

    def __init__(self, target: Callable[[], None]) -> None:
        self._error: BaseException | None = None

        def run() -> None:
            try:
                target()
            except BaseException as exc:  # re-raised in the caller's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name="demo-publisher", daemon=True)
        self._thread.start()

    def result(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"publishing did not finish within {timeout_s:.0f} s")
        if self._error is not None:
            raise self._error


class _Trickle:
    """The other sensors keep reporting (paced, a few readings a second) from creation until stopped."""

    def __init__(self, scenario: Scenario, rate: float, sensors: int, seed: int) -> None:
        self._rate = max(rate, 0.1)
        self._sensors = sensors
        self._seed = seed
        self._stop = threading.Event()
        self._thread = InThread(lambda: scenario.publish("waiting for the split", self._readings(), quiet=True))

    def stop(self) -> None:
        self._stop.set()
        self._thread.result(60)

    def _readings(self) -> Iterator[tuple[float, dict[str, Any]]]:
        rng = random.Random(self._seed)
        start = now_ms()
        n = 0
        while not self._stop.is_set():
            offset = n / self._rate
            yield offset, _reading(rng, self._sensors, f"trickle-{self._seed}-{n}", start + int(offset * 1000))
            n += 1


class _PhaseLedger:
    def __init__(self, name: str) -> None:
        self.name = name
        self.readings: list[dict[str, Any]] = []
        self.noted_s = 0.0

    def add(self, reading: dict[str, Any]) -> None:
        self.readings.append(reading)

    def phase(self) -> Phase:
        times = [int(r["timestamp"]) for r in self.readings]
        return Phase(
            name=self.name,
            from_ms=min(times),
            to_ms=max(times) + 1,
            readings=len(self.readings),
            hot_readings=sum(1 for r in self.readings if r["entity_id"] == HOT_SENSOR),
        )
