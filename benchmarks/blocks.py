"""What blocks cost against one item per reading, in DynamoDB's own accounting, on the same generated readings.

**One item per reading** is the item ingest wrote before blocks (git show b224d42:functions/keydesign/items.py):
``pk`` (hybrid ``<shard>#<bucket>``), ``sk`` ``<entity>#<ts>#<event id>``, ``e``, ``t``, ``i``, ``m``, ``d``
(when present), ``ttl``; sized by :func:`keydesign.item_size`. **Blocks** are what :meth:`keydesign.Layout.pack`
makes of each simulated ingest batch. Both sides are billed as DynamoDB bills them: a put costs
``write_units(item size)`` (1 per KB, rounded up); storage is the item size plus 100 bytes per item.

How an ingest batch forms (Lambda's Kinesis event source, standard iterator), per stream shard:

* the producer sends each reading after a jitter drawn from [0, ``JITTER_MS``), so event times arrive out of
  order; its default ``group`` partition key (``g<stable_hash(entity) mod 256>``) puts every reading of an
  entity in one Kinesis shard, the shard that MD5 of that key falls in (as Kinesis maps keys);
* the poller reads a shard once a second; with ``MaximumBatchingWindowInSeconds`` W it gathers for W s. A
  batch is what arrived in ``max(W, 1 s)``, cut short when its records reach Lambda's 6 MB invocation
  payload (record data is base64 in the event: 4.5 MB of readings). Each shard's batches start at their own
  random phase. A batch's readings carry increasing Kinesis sequence numbers of full size (56 digits), the
  block's version;
* the added latency of a reading is its batch's close time minus its arrival.

Only batches wholly inside the simulated span count (none cut by its start or end), so the figures are the
steady state. The deployment is the stack's defaults (:meth:`infra.config.Context.parse`): hybrid
layout, N = 100, 1-hour buckets, 30 days of retention, 50 Kinesis shards. A **sample** of a fleet is
simulated: a fleet sensor's blocks depend only on its own rate, the window and its shard's batch length,
which comes from the whole fleet's rate per shard, so figures per reading do not depend on how many
sensors are simulated (tested: tests/unit/benchmarks/test_blocks.py). The hottest key is the hybrid base
partition of ``sensor-alpha-001`` without a split: its own blocks and those of every fleet sensor that
hashes to the same base shard, all of which the seed 000 run simulates.

Run: ``python -m benchmarks blocks`` (harness).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness import Result, benchmark
from infra.config import Context
from keydesign import (
    Layout,
    Reading,
    ShardMap,
    item_size,
    parse_timestamp,
    shard_of,
    stable_hash,
    ttl_for,
    write_units,
)
from keydesign.capacity import STORAGE_OVERHEAD_BYTES
from keydesign.legacy import legacy_item

START_MS = parse_timestamp("2026-11-22T06:10:00Z")  # well inside an hour's bucket
WINDOWS_S = (0, 1, 2, 5, 10, 20)
JITTER_MS = 1_000
POLL_MS = 1_000
PRODUCER_GROUPS = 256
PAYLOAD_BYTES = 6 * 1024 * 1024 * 3 // 4  # of record data: the event carries it as base64
#: Kinesis sequence numbers are 56-digit decimals: the version in a block header is that wide.
SEQUENCE_BASE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898
HOT_SENSOR = "sensor-alpha-001"
MONTH_S = 30 * 86_400


@dataclass(frozen=True, slots=True)
class Fleet:
    """A workload: ``sensors`` entities each sending every ``interval_ms``, plus hot entities at their rates."""

    name: str
    sensors: int
    interval_ms: float
    measures: Callable[[random.Random], dict[str, float]]
    hot: tuple[tuple[str, float], ...] = ()
    prefix: str = "sensor-"
    with_event_id: bool = False

    def sensor(self, index: int) -> str:
        return f"{self.prefix}{index + 1:0{len(str(self.sensors))}d}"

    @property
    def fleet_rate(self) -> float:
        return self.sensors * 1_000 / self.interval_ms


def _weather(rng: random.Random) -> dict[str, float]:
    return {
        "temperature": round(rng.gauss(21.0, 3.0), 2),
        "humidity": round(rng.uniform(30, 70), 1),
        "pressure": round(rng.gauss(1013.25, 5.0), 2),
    }


def _value(rng: random.Random) -> dict[str, float]:
    return {"value": round(rng.uniform(0, 100), 2)}


#: Seed 000: 10,000 sensors at 5 readings/s, three measures, derived event ids; sensor-alpha-001 at 2,000/s.
SEED_000 = Fleet("seed 000", 10_000, 200.0, _weather, hot=((HOT_SENSOR, 2_000.0),))
#: Seed 003: 1 million devices, 10 billion readings a month (one per device every 259 s), ~100-byte readings.
SEED_003 = Fleet("seed 003", 1_000_000, MONTH_S * 1_000 / 10_000, _value, prefix="device-", with_event_id=True)
#: A sparse fleet: one reading per sensor per minute.
SPARSE = Fleet("sparse", 10_000, 60_000.0, _weather)


@dataclass(frozen=True, slots=True)
class Deployment:
    layout: Layout
    shard_map: ShardMap
    retention_ms: int
    stream_shards: int
    default_window_s: int

    @classmethod
    def defaults(cls, context: Mapping[str, object] | None = None) -> Deployment:
        """The stack's defaults, with ``context`` (cdk.json keys) over them."""
        config = Context.parse(dict(context or {}))
        layout = config.layout()
        return cls(
            layout,
            ShardMap.initial(layout.bucket, config.shards),
            config.retention_ms,
            config.kinesis_shards,
            config.ingest_batching_window_s,
        )

    def group_shard(self, group: int) -> int:
        """The stream shard of producer group ``group``'s partition key, as Kinesis maps keys (MD5)."""
        digest = hashlib.md5(f"g{group}".encode()).digest()  # noqa: S324 - Kinesis's own key hash
        return int.from_bytes(digest, "big") * self.stream_shards >> 128

    def kinesis_shard(self, entity: str) -> int:
        return self.group_shard(stable_hash(entity) % PRODUCER_GROUPS)


@dataclass(frozen=True, slots=True)
class Arrival:
    """A reading, when it reaches Kinesis, and the partition key and size of its item of one reading."""

    at_ms: float
    reading: Reading
    item_pk: str
    item_bytes: int
    #: Its bytes in a Kinesis record: the producer's JSON and a comma.
    record_bytes: int


@dataclass(slots=True)
class Tally:
    """Readings and what storing them costs, one item each and in blocks."""

    readings: int = 0
    item_units: int = 0
    item_bytes: int = 0
    block_units: int = 0
    block_bytes: int = 0
    blocks: int = 0
    latency_ms: float = 0.0
    latency_max_ms: float = 0.0

    def per_reading(self) -> dict[str, float]:
        n = self.readings
        return {
            "readings": n,
            "item_wu_per_reading": self.item_units / n,
            "item_bytes_per_reading": self.item_bytes / n,
            "block_wu_per_reading": self.block_units / n,
            "block_bytes_per_reading": self.block_bytes / n,
            "readings_per_block": n / self.blocks,
            "latency_mean_ms": self.latency_ms / n,
            "latency_max_ms": self.latency_max_ms,
        }


@dataclass(slots=True)
class Outcome:
    """A run's tallies by kind of entity (``fleet`` or a hot entity's name), and the write units each
    partition key took, with the seconds they were spread over."""

    tallies: dict[str, Tally] = field(default_factory=lambda: defaultdict(Tally))
    #: Write units per second on each partition key: blocks, and one item per reading.
    key_units: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    item_key_units: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    #: Blocks' write units landing on (key, second).
    landed: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))

    def peak(self, pk: str) -> int:
        """The most block write units ``pk`` took in one second."""
        return max((units for (key, _), units in self.landed.items() if key == pk), default=0)


def old_item(reading: Reading, deployment: Deployment) -> dict[str, object]:
    """The item one reading had before blocks (hybrid), as ``keydesign.build_item`` made it at b224d42."""
    return legacy_item(reading, deployment.layout, deployment.shard_map, ttl_for(reading, deployment.retention_ms))


def arrivals(
    fleet: Fleet, entities: Iterable[str], duration_ms: int, deployment: Deployment, seed: int
) -> dict[str, list[Arrival]]:
    """Each entity's readings over ``duration_ms`` and when they reach Kinesis (event time plus jitter)."""
    rng = random.Random(seed)
    hot = dict(fleet.hot)
    out: dict[str, list[Arrival]] = {}
    for entity in entities:
        interval = 1_000 / hot[entity] if entity in hot else fleet.interval_ms
        t = rng.uniform(0, interval)
        mine = []
        while t < duration_ms:
            raw: dict[str, Any] = {
                "entity_id": entity,
                "timestamp": START_MS + int(t),
                "measures": fleet.measures(rng),
            }
            if fleet.with_event_id:
                raw["event_id"] = f"{rng.getrandbits(48):012x}"
            reading = Reading.parse(raw)
            item = old_item(reading, deployment)
            record = len(json.dumps(reading.to_json())) + 1
            mine.append(Arrival(t + rng.uniform(0, JITTER_MS), reading, str(item["pk"]), item_size(item), record))
            t += interval
        out[entity] = mine
    return out


def batch_ms(fleet: Fleet, deployment: Deployment, shard: int, window_s: int, reading_bytes: float) -> float:
    """How long a batch of ``shard`` gathers: the window (a second at least), or less when the shard's
    readings fill Lambda's payload first. Each producer group carries 1/256 of the fleet."""
    groups = sum(1 for g in range(PRODUCER_GROUPS) if deployment.group_shard(g) == shard)
    rate = fleet.fleet_rate * groups / PRODUCER_GROUPS
    rate += sum(r for entity, r in fleet.hot if deployment.kinesis_shard(entity) == shard)
    full_ms = PAYLOAD_BYTES / (rate * reading_bytes) * 1_000 if rate else math.inf
    return min(max(window_s * 1_000, POLL_MS), full_ms)


@dataclass(frozen=True, slots=True)
class Batch:
    """One Lambda batch of one Kinesis shard: its readings in arrival order, each with its sequence number."""

    shard: int
    opens_ms: float
    closes_ms: float
    #: Seconds of the shard's traffic that its counted batches cover (a key's units per second divide by it).
    shard_span_s: float
    arrivals: tuple[Arrival, ...]
    sequences: tuple[int, ...]


def form_batches(
    fleet: Fleet,
    readings: dict[str, list[Arrival]],
    deployment: Deployment,
    *,
    window_s: int,
    duration_ms: int,
    seed: int = 1,
) -> list[Batch]:
    """Each shard's batches of ``readings`` that lie wholly in the steady state (after the first jitter, before
    the end)."""
    rng = random.Random(seed)
    by_shard: dict[int, list[Arrival]] = defaultdict(list)
    for entity, mine in readings.items():
        by_shard[deployment.kinesis_shard(entity)].extend(mine)
    every = [a for mine in readings.values() for a in mine]
    reading_bytes = sum(a.record_bytes for a in every) / max(1, len(every))
    out: list[Batch] = []
    for shard, mine in sorted(by_shard.items()):
        length = batch_ms(fleet, deployment, shard, window_s, reading_bytes)
        phase = rng.uniform(0, length)
        numbered: dict[int, list[Arrival]] = defaultdict(list)
        for arrival in sorted(mine, key=lambda a: a.at_ms):
            numbered[math.floor((arrival.at_ms - phase) / length)].append(arrival)
        counted = [
            n for n in sorted(numbered) if phase + n * length >= JITTER_MS and phase + (n + 1) * length <= duration_ms
        ]
        sequence = SEQUENCE_BASE
        for number in counted:
            batch = numbered[number]
            sequences = tuple(range(sequence + 1, sequence + 1 + len(batch)))
            sequence += len(batch)
            opens = phase + number * length
            out.append(Batch(shard, opens, opens + length, len(counted) * length / 1_000, tuple(batch), sequences))
    return out


def account(fleet: Fleet, batches: Iterable[Batch], deployment: Deployment) -> Outcome:
    """Both ways of storing each batch, tallied by kind of entity and by partition key."""
    hot = {entity for entity, _ in fleet.hot}
    outcome = Outcome()
    for batch in batches:
        for arrival in batch.arrivals:
            tally = outcome.tallies[arrival.reading.entity_id if arrival.reading.entity_id in hot else "fleet"]
            tally.readings += 1
            tally.item_units += write_units(arrival.item_bytes)
            tally.item_bytes += arrival.item_bytes + STORAGE_OVERHEAD_BYTES
            tally.latency_ms += batch.closes_ms - arrival.at_ms
            tally.latency_max_ms = max(tally.latency_max_ms, batch.closes_ms - arrival.at_ms)
            outcome.item_key_units[arrival.item_pk] += write_units(arrival.item_bytes) / batch.shard_span_s
        entries = [(a.reading, sequence) for a, sequence in zip(batch.arrivals, batch.sequences, strict=True)]
        for block in deployment.layout.pack(entries, deployment.shard_map, retention_ms=deployment.retention_ms):
            tally = outcome.tallies[block.entity_id if block.entity_id in hot else "fleet"]
            tally.blocks += 1
            tally.block_units += block.write_units
            tally.block_bytes += block.size + STORAGE_OVERHEAD_BYTES
            outcome.key_units[block.key.pk] += block.write_units / batch.shard_span_s
            # a batch's puts land within the second after it closes: its units are that second's
            outcome.landed[block.key.pk, int(batch.closes_ms // 1_000)] += block.write_units
    return outcome


def combined(fleet: Fleet, outcome: Outcome) -> dict[str, float]:
    """Per reading over the whole fleet: the fleet's and each hot entity's figures weighted by their rates."""
    parts = [(fleet.fleet_rate, outcome.tallies["fleet"].per_reading())]
    parts += [(rate, outcome.tallies[entity].per_reading()) for entity, rate in fleet.hot]
    total = sum(rate for rate, _ in parts)
    names = ("item_wu_per_reading", "item_bytes_per_reading", "block_wu_per_reading", "block_bytes_per_reading")
    out = {name: sum(rate * figures[name] for rate, figures in parts) / total for name in names}
    out["latency_mean_ms"] = sum(rate * figures["latency_mean_ms"] for rate, figures in parts) / total
    out["latency_max_ms"] = max(figures["latency_max_ms"] for _, figures in parts)
    return out


def seed_000_sample(deployment: Deployment) -> list[str]:
    """sensor-alpha-001 and every fleet sensor that shares its hybrid base partition (about 1 in N)."""
    total = deployment.shard_map.global_shards_at(START_MS)
    home = shard_of(HOT_SENSOR, total)
    neighbours = [s for s in map(SEED_000.sensor, range(SEED_000.sensors)) if shard_of(s, total) == home]
    return [HOT_SENSOR, *neighbours]


def run(quick: bool = False, deployment: Deployment | None = None) -> dict[str, Any]:
    deployment = deployment or Deployment.defaults()
    duration = 42_000 if quick else 60_000  # two batches of the longest window and the first jitter
    sparse_duration = 600_000 if quick else 1_800_000
    hot_pk = deployment.layout.partitions_of(HOT_SENSOR, START_MS, deployment.shard_map)[0]
    devices = map(SEED_003.sensor, range(0, SEED_003.sensors, 500))
    sparse = map(SPARSE.sensor, range(0, SPARSE.sensors, 5))
    samples: Sequence[tuple[Fleet, dict[str, list[Arrival]], int]] = [
        (SEED_000, arrivals(SEED_000, seed_000_sample(deployment), duration, deployment, 0), duration),
        (SEED_003, arrivals(SEED_003, devices, sparse_duration, deployment, 3), sparse_duration),
        (SPARSE, arrivals(SPARSE, sparse, sparse_duration, deployment, 4), sparse_duration),
    ]
    sweep: list[dict[str, Any]] = []
    for window in WINDOWS_S:
        row: dict[str, Any] = {"window_s": window}
        for fleet, readings, span in samples:
            batches = form_batches(fleet, readings, deployment, window_s=window, duration_ms=span)
            outcome = account(fleet, batches, deployment)
            row[fleet.name] = combined(fleet, outcome)
            if fleet is SEED_000:
                row["seed 000 parts"] = {name: t.per_reading() for name, t in outcome.tallies.items()}
                row["hot key"] = {
                    "pk": hot_pk,
                    "item_wcu_per_s": outcome.item_key_units[hot_pk],
                    "block_wcu_per_s": outcome.key_units[hot_pk],
                    "block_peak_wcu_in_a_second": outcome.peak(hot_pk),
                }
        sweep.append(row)
    return {
        "quick": quick,
        "simulated_s": {f.name: span / 1_000 for f, _, span in samples},
        "sampled_entities": {f.name: len(r) for f, r, _ in samples},
        "reading_json_bytes": {
            f.name: sum(a.record_bytes - 1 for m in r.values() for a in m) / sum(len(m) for m in r.values())
            for f, r, _ in samples
        },
        "deployment_window_s": deployment.default_window_s,
        "sweep": sweep,
    }


def to_result(figures: dict[str, Any]) -> Result:
    result = Result(
        params={
            "windows_s": list(WINDOWS_S),
            "jitter_ms": JITTER_MS,
            "simulated_s": figures["simulated_s"],
            "sampled_entities": figures["sampled_entities"],
            "reading_json_bytes": {k: round(v, 1) for k, v in figures["reading_json_bytes"].items()},
            "deployment_window_s": figures["deployment_window_s"],
            "sweep": figures["sweep"],
        },
        method=(
            "the same generated readings stored one item per reading (the b224d42 item, keydesign.item_size) and "
            "as Layout.pack makes blocks of each simulated Lambda batch (per Kinesis shard: what arrived in "
            "max(window, 1 s), producer jitter 0-1 s, 6 MB payload cap); write units = write_units(item size) per "
            "put, billed bytes = item size + 100 per item; steady-state batches only; defaults of cdk.json"
        ),
    )
    first = figures["sweep"][0]
    hot = first["hot key"]
    result.add("hottest key, one item per reading: write units", round(hot["item_wcu_per_s"], 1), "WCU/s", hot["pk"])
    for name in ("seed 000", "seed 003", "sparse"):
        result.add(
            f"{name}, one item per reading: write units", round(first[name]["item_wu_per_reading"], 3), "WU/reading"
        )
        result.add(
            f"{name}, one item per reading: billed bytes", round(first[name]["item_bytes_per_reading"], 1), "B/reading"
        )
    for row in figures["sweep"]:
        window = row["window_s"]
        for name in ("seed 000", "seed 003", "sparse"):
            result.add(
                f"{name}, window {window} s: write units", round(row[name]["block_wu_per_reading"], 4), "WU/reading"
            )
            result.add(
                f"{name}, window {window} s: billed bytes", round(row[name]["block_bytes_per_reading"], 1), "B/reading"
            )
        result.add(f"seed 000, window {window} s: added latency, mean", round(row["seed 000"]["latency_mean_ms"]), "ms")
        result.add(f"seed 000, window {window} s: added latency, max", round(row["seed 000"]["latency_max_ms"]), "ms")
        hot = row["hot key"]
        result.add(f"hottest key, window {window} s: write units", round(hot["block_wcu_per_s"], 1), "WCU/s", hot["pk"])
        result.add(f"hottest key, window {window} s: most in one second", hot["block_peak_wcu_in_a_second"], "WCU")
    return result


@benchmark("blocks", "write units and billed bytes per reading: blocks against one item per reading, window sweep")
def blocks_cost(quick: bool) -> Result:
    return to_result(run(quick))
