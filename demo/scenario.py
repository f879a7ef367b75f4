"""The demo's traffic (steps 0 to 3 of docs/local.md's story, the sparse fleet, and a few entities through each
agent's format), published through the producer library; each valid reading recorded in the ledger, under its
phase's name, as it is published (an agent's, as ingest stores it)."""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from demo.report import AGENT_MEASUREMENT, AGENT_PHASE, HOT_SENSOR, SPARSE_PHASE, SPARSE_PREFIX
from infra.config import IotTopicRule
from keydesign import Reading, format_ts
from local_runtime.scheduler import ReplayClock
from local_runtime.system import LocalSystem
from producer.formats import AGENT_FORMATS, OTLP_PROTO, AgentPacker
from producer.packing import Packer, RecordWriter
from producer.publisher import Publisher, PublishSummary, kinesis_client, publish
from producer.synthetic import Workload, generate

if TYPE_CHECKING:
    from demo.options import DemoOptions

T = TypeVar("T")
Say = Callable[[str], None]
#: The hot sensor measures vibration too: four channels of noise, which compress far less than the
#: others' slow temperatures, so its blocks make its key hot in write units.
CHANNELS = ("vib_x", "vib_y", "vib_z", "vib_rms")
#: Through each agent's format: this many entities, a reading a second each for this many seconds, and one
#: reading the format cannot give an entity (from IoT Core: a message without a time).
AGENT_ENTITIES = 2
AGENT_READINGS = 3


class Scenario:
    """Publishes the story and records it: the ledger, the producer's summaries, the readings refused."""

    def __init__(self, system: LocalSystem, options: DemoOptions, say: Say) -> None:
        self.system, self.options, self.say = system, options, say
        self.ledger: list[tuple[str, dict[str, Any]]] = []
        self.summaries: list[PublishSummary] = []
        self.garbage_published = 0
        self.refused: dict[str, Any] = {}
        self.replay: dict[str, Any] = {}  # the rotator's replayed hours, for the report
        self._lock = threading.Lock()
        self._threads = ThreadPoolExecutor(3, thread_name_prefix="demo-publisher")
        # One client for every publisher (a client is thread-safe; making one loads Kinesis' model again,
        # most of a second on a busy machine, and the agents' step alone publishes ten times).
        e = system.endpoints
        self._kinesis, self._stream = kinesis_client(endpoint_url=e.endpoint_url, region=e.region), e.stream_name

    def history(self, clock: ReplayClock) -> None:
        """The rotator replays its past on the replay clock while readings stamped with that clock land in
        each hour's table; then readings of a dropped hour, which ingest must refuse, each with its reason."""
        o, config, started = self.options, self.system.config, time.monotonic()
        spread_ms = config.rotation_interval_minutes() * 60_000
        self.say(
            f"rotation: replaying {o.history_s / 3600:g} h of {config.table_period} tables, "
            f"{o.history_rate:g} readings/s stamped with the replayed clock"
        )
        rng, deadline = random.Random(o.seed + 3), started + o.history_s / spread_ms * 10_000 + 120

        def readings() -> Iterator[tuple[float, dict[str, Any]]]:
            # Each less up to a rotator period, so they spread over it (never ahead of the clock: ingest
            # refuses a reading from its future); the replay moves on once ingest has taken what was sent.
            going = lambda _: not clock.caught_up() and time.monotonic() < deadline  # noqa: E731
            for n in itertools.takewhile(going, itertools.count()):
                yield (
                    n / o.history_rate,
                    _reading(rng, o.sensors, f"history-{n}", clock.now_ms() - rng.randrange(spread_ms)),
                )

        self.publish("rotation history (replayed time)", readings())
        caught_up = time.monotonic() - started
        self.replay = {"replayed_hours": round(o.history_s / 3600, 2), "replay_pace_s": o.history_pace_s}
        self.replay["caught_up_after_s"] = round(caught_up, 1)
        runs = list(self.system.rotations)
        dropped = [t for run in runs for t in (run.get("summary") or {}).get("deleted", [])]
        self.say(f"  caught up after {caught_up:.0f} s, {len(runs)} runs; dropped {len(dropped)} tables")
        layout, period = config.layout(), config.layout().table_period
        if dropped and period is not None:
            low = min(int(r["now_ms"]) for r in runs) - config.retention_ms - 2 * period.nominal_ms
            start = next(s for s in period.starts(low, now_ms()) if layout.table_for(s) == dropped[0])
            refused = [
                _reading(rng, 1, f"dropped-period-{n}", start + 1_800_000 + n) for n in range(o.refused_readings)
            ]
            self._record(publish([(0.0, r) for r in refused], self._publisher(), Packer(), validate=False))
            self.refused = {"table": dropped[0], "event_ids": [r["event_id"] for r in refused]}
            self.say(f"  published {len(refused)} readings of {format_ts(start)}, whose table {dropped[0]} is gone")

    def before_the_split(self, read_map: Callable[[], T | None]) -> tuple[Workload, T | None]:
        """Phase 1 in real time, and the shard map as ingest first stores it (``read_map()``, before any
        change); then readings that break a rule and records that are not JSON."""
        o = self.options
        hot = ((HOT_SENSOR, o.hot_rate),)
        first = Workload(o.sensors, o.base_rate, hot=hot, duration_s=o.hot_phase_s, seed=o.seed, start_ms=now_ms())
        self.say(
            f"phase 1 (before the split): {first.total:,} readings over {o.hot_phase_s:g} s in real time, "
            f"{o.sensors:,} sensors at {o.base_rate:,.0f}/s in all and {HOT_SENSOR} at {o.hot_rate:,.0f}/s"
        )
        phase = self._threads.submit(self.publish, "before the split", with_channels(generate(first), o.seed))
        map_before = wait_for(read_map, o.hot_phase_s + 60)
        phase.result(o.hot_phase_s + 120)
        items = [(0.0, reading) for reading in invalid_readings(o.invalid_readings, now_ms())]
        self._record(publish(items, self._publisher(), Packer(), validate=False))
        garbage = [{"Data": f"not json {n} \x00".encode(), "PartitionKey": f"g-{n}"} for n in range(o.garbage_records)]
        if garbage:  # each record that is not JSON is one unit ingest must reject
            failed = int(
                self._kinesis.put_records(StreamName=self._stream, Records=garbage).get("FailedRecordCount", 0)
            )
            self.garbage_published = len(garbage) - failed
        self.say(f"  and {len(items)} readings that break a rule, {self.garbage_published} records that are not JSON")
        return first, map_before

    def await_split(self, scheduled: Callable[[], int | None], progress: Callable[[], str]) -> int | None:
        """The split's boundary once ``scheduled()`` gives one, and the wall clock past it; the other
        sensors keep reporting meanwhile (a window is judged once the stream has passed it)."""
        o, stop = self.options, threading.Event()
        self.say(f"waiting for the hot-key detector to split {HOT_SENSOR} (the others trickle at {o.trickle_rate:g}/s)")

        def trickle() -> Iterator[tuple[float, dict[str, Any]]]:
            rng, start = random.Random(o.seed + 2), now_ms()
            for n in itertools.takewhile(lambda _: not stop.is_set(), itertools.count()):
                yield (
                    n / o.trickle_rate,
                    _reading(rng, o.sensors, f"trickle-{n}", start + int(n * 1000 / o.trickle_rate)),
                )

        others = self._threads.submit(self.publish, "waiting for the split", trickle())
        try:
            tick = lambda waited: self.say(f"  {waited:.0f} s: {progress()}")  # noqa: E731 - a progress line
            boundary = wait_for(scheduled, o.split_timeout_s, tick)
            if boundary is None:
                self.say(f"no split of {HOT_SENSOR} within {o.split_timeout_s:.0f} s")
                return None
            wait_s = max(0, boundary - now_ms()) / 1000
            self.say(
                f"split scheduled from {format_ts(boundary)}; waiting {wait_s:.0f} s for the wall clock to pass it"
            )
            wait_for(lambda: now_ms() >= boundary + 500 or None, wait_s + 30)
            return boundary
        finally:
            stop.set()
            others.result(60)

    def after_the_split(self, first: Workload) -> None:
        """Phase 2: the same traffic, every event time after the boundary (the clock has passed it)."""
        second = replace(first, duration_s=self.options.split_phase_s, seed=self.options.seed + 1, start_ms=now_ms())
        self.say(f"phase 2 (after the split): {second.total:,} readings over {self.options.split_phase_s:g} s")
        self.publish("after the split", with_channels(generate(second), self.options.seed + 1))

    def sparse_fleet(self) -> Future[None]:
        """The sparse fleet, published in the background from now (while the demo awaits the split): each of
        ``sparse_entities`` entities sends a reading every ``sparse_period_s`` (from its own random phase) for
        ``sparse_s`` in real time, keyed by its write-tier group as ``tsctl publish`` keys it. Each sends
        fewer readings an ingest batch than make a block pay off, so ingest packs them into group items."""
        o, start = self.options, now_ms()
        rng = random.Random(o.seed + 5)
        sends = sorted(
            (phase + n * o.sparse_period_s, entity, n)
            for entity in range(1, o.sparse_entities + 1)
            for phase in [rng.uniform(0, o.sparse_period_s)]
            for n in range(math.ceil((o.sparse_s - phase) / o.sparse_period_s))
        )
        self.say(
            f"sparse fleet: {o.sparse_entities:,} entities ({SPARSE_PREFIX}0001...), a reading each every "
            f"{o.sparse_period_s:g} s for {o.sparse_s:g} s ({len(sends):,} readings), keyed by write-tier group"
        )
        readings = (
            (
                offset,
                {
                    "entity_id": f"{SPARSE_PREFIX}{entity:04d}",
                    "event_id": f"{SPARSE_PREFIX}{entity:04d}-{n}",
                    "timestamp": start + int(offset * 1000),
                    "measures": {"value": round(rng.uniform(0, 100), 2)},
                },
            )
            for offset, entity, n in sends
        )
        packer = Packer(groups=self.system.config.write_tier_groups)
        return self._threads.submit(self.publish, SPARSE_PHASE, readings, packer)

    def agents(self) -> None:
        """A few entities publish through each agent's format as the agent writes it (``tsctl publish
        --record-format``): Telegraf's line protocol and JSON, the Collector's OTLP (protobuf gzipped, JSON),
        an IoT Core rule's output; each reading in the ledger as ingest stores it (an agent sends no event
        id: ingest derives it), and one bad reading of each, which ingest must reject with the reason."""
        rng, rule = random.Random(self.options.seed + 4), IotTopicRule("sensors/+/readings", 2)
        start = now_ms() // 1000 * 1000 - 1000 * AGENT_READINGS  # whole seconds: Telegraf's JSON carries seconds
        self.say(
            f"agents: {AGENT_ENTITIES} entities x {AGENT_READINGS} readings through each of {', '.join(AGENT_FORMATS)}"
            ", and one reading each the format cannot give an entity (IoT Core: a message without a time)"
        )
        for fmt in AGENT_FORMATS:
            compression = "gzip" if fmt == OTLP_PROTO else "none"
            writer = AgentPacker(fmt, measurement=AGENT_MEASUREMENT, compression=compression, iot_rule=rule)
            sent = [
                {
                    "entity_id": f"{fmt.replace('_', '-')}-{e}",
                    "timestamp": start + 1000 * n,
                    "measures": {"temp": round(rng.uniform(15, 30), 2)},
                    "dimensions": {"site": "plant-7"},
                }
                for e in range(1, AGENT_ENTITIES + 1)
                for n in range(AGENT_READINGS)
            ]
            with self._lock:
                self.ledger += [
                    (f"{AGENT_PHASE}{fmt}", {**stored, "event_id": Reading.parse(stored).event_id})
                    for reading in sent
                    for stored in writer.stored(reading)
                ]
            self._record(publish([(0.0, r) for r in sent], self._publisher(), writer))
            bad: dict[str, Any] = {"measures": {f"bad_{fmt}": 1}}
            bad |= {"entity_id": f"{fmt.replace('_', '-')}-bad"} if fmt == "iot" else {"timestamp": start}
            self._record(publish([(0.0, bad)], self._publisher(), writer, validate=False))

    def publish(
        self, phase: str, items: Iterable[tuple[float, dict[str, Any]]], packer: RecordWriter | None = None
    ) -> None:
        """Publish ``(offset_s, reading)`` pairs in real time, a quarter second at a time, each reading
        recorded in the ledger under ``phase`` (packed by ``packer``, by default the producer's)."""

        def recorded() -> Iterator[tuple[float, dict[str, Any]]]:
            for offset, reading in items:
                with self._lock:
                    self.ledger.append((phase, reading))
                yield offset, reading

        self._record(publish(recorded(), self._publisher(), packer or Packer(), pace=True, linger_ms=250))

    def _publisher(self) -> Publisher:
        return Publisher(self._kinesis, self._stream)

    def _record(self, summary: PublishSummary) -> None:
        with self._lock:
            self.summaries.append(summary)


def with_channels(items: Iterable[tuple[float, dict[str, Any]]], seed: int) -> Iterator[tuple[float, dict[str, Any]]]:
    """The hot sensor's readings with its vibration channels (:data:`CHANNELS`)."""
    rng = random.Random(seed)
    for offset, reading in items:
        if reading["entity_id"] == HOT_SENSOR:
            reading["measures"].update({name: round(rng.gauss(0.0, 1.0), 3) for name in CHANNELS})
        yield offset, reading


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


def _reading(rng: random.Random, sensors: int, event_id: str, at_ms: int) -> dict[str, Any]:
    """One of the ordinary sensors' readings."""
    measures = {"temp": round(rng.uniform(15, 30), 2), "rh": round(rng.uniform(30, 60), 1)}
    entity = f"sensor-{rng.randrange(1, sensors + 1):06d}"
    return {"entity_id": entity, "event_id": event_id, "timestamp": at_ms, "measures": measures}


def now_ms() -> int:
    return int(time.time() * 1000)


def wait_for(
    condition: Callable[[], T | None], timeout_s: float, on_tick: Callable[[float], None] | None = None
) -> T | None:
    """``condition()`` once it is neither None nor False, polled every half second; None after
    ``timeout_s``. ``on_tick(waited_s)`` every 15 s while waiting."""
    started = last_tick = time.monotonic()
    while (value := condition()) is None or value is False:
        if (now := time.monotonic()) - started >= timeout_s:
            return None
        if on_tick is not None and now - last_tick >= 15:
            last_tick = now
            on_tick(now - started)
        time.sleep(min(0.5, max(0.0, timeout_s - (now - started))))
    return value
