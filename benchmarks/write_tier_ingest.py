"""The write tier's real ingest path: what the real Ingestor writes, per reading, next to the models.

For seed 000, seed 003 and the sparse fleet (:mod:`benchmarks.blocks`' workloads), readings are simulated as
:mod:`benchmarks.blocks` does (each entity's readings, jittered arrivals at Kinesis), published as the producer
publishes them with the write tier on (:class:`producer.packing.Packer`, partition key
``WriteTier.partition_key``, so a group lives on one stream shard), cut into each shard's Lambda batches
(``max(window, 1 s)``, or less when the shard's readings fill Lambda's 6 MB payload first; the stack's 10 s window
and 50 shards sharing the fleet), and every batch goes through the **real** ``Ingestor`` as the default stack
configures it (hybrid layout, hourly tables, occupancy records, rollup marks 1m, ``WRITE_TIER_GROUPS`` = the
fleet's G auto) over the in-memory DynamoDB (:class:`doubles.memory_dynamo.MemoryDynamo`).

Which entities. A group item holds what a batch has of its group, so a group must be simulated whole: the
sparse fleets simulate every entity of a few groups (seed 003: 4 of 1,024 groups, about 3,900 devices, for 10
minutes; the sparse fleet: 4 of 32, about 1,250 sensors, for 30 minutes); seed 000's sensors are dense (50
readings a batch) and keep their blocks, so the sample is ``sensor-alpha-001`` and the sensors of its hybrid
partition (:func:`benchmarks.blocks.seed_000_sample`), for a minute. Only batches wholly in the steady state count.

What is counted, per distinct reading ingested: write units of every put, by kind (group items, blocks, dense
marks; then occupancy records and rollup marks, reported apart: they are unchanged by the write tier, and the
rollups themselves are the ``rollups`` benchmark's), from each item's size by DynamoDB's rules; billed bytes
(item + 100 B) per reading of the group items and of the blocks, while they are kept; and at rest over the 30
days of retention (group items live ``KEEP_MS`` past their hour, 4 days and a half hour on average, then compaction's
blocks hold the readings: wtcompact's figures). Every reading is checked back: decoded from the stored group items
and blocks, each once.

Next to it, the model's figures for the same fleet and window: the ``write-tier`` design table's group item
(``benchmarks.write_tier.group_payload``, Poisson fill) and ``tsctl plan``'s (``keydesign.capacity``: the real
encoder, Poisson fill).

Run: ``python -m benchmarks write-tier-ingest`` (``--quick``: 2 groups, shorter runs).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
from collections import Counter, defaultdict
from typing import Any

from adapters.observability import metrics
from benchmarks import blocks, write_tier
from benchmarks.blocks import SEED_000, SEED_003, SPARSE, START_MS, Arrival, Deployment, Fleet
from benchmarks.harness import Result, benchmark
from benchmarks.ingest import NullSQS, stack_env
from doubles.memory_dynamo import MemoryDynamo
from ingest.kinesis_records import parse_records
from ingest.logic import Ingestor
from ingest.settings import IngestSettings
from keydesign import Ingest, Reading, Workload, decode_block, item_size, plan_capacity, write_units
from keydesign.blocks import decode_group, keep_newest
from keydesign.capacity import poisson_fill
from keydesign.layouts import parse_keys
from keydesign.writetier import DENSE_MARK_PREFIX, DENSE_READINGS, GROUP_PK_PREFIX, KEEP_MS, SLICE_MS, WriteTier
from producer.packing import Packer

WINDOW_S = 10
STREAM_SHARDS = 50
RETENTION_DAYS = 30
OVERHEAD = 100
KINDS = ("group items", "blocks", "dense marks", "occupancy", "rollup marks", "other control items")


def _plain(value: dict[str, Any]) -> Any:
    ((kind, raw),) = value.items()
    if kind == "B":
        return raw if isinstance(raw, bytes) else base64.b64decode(raw)
    if kind == "N":
        return float(raw)
    if kind == "M":
        return {k: _plain(v) for k, v in raw.items()}
    return raw


def _size(item: dict[str, Any]) -> int:
    """An item's size by DynamoDB's rules, from its low-level form."""
    return item_size({k: _plain(v) for k, v in item.items()})


class CountingDynamo(MemoryDynamo):
    """The in-memory DynamoDB, its puts' write units and billed bytes tallied by kind of item."""

    def __init__(self, control_table: str) -> None:
        super().__init__()
        self.control_table = control_table
        self.units: Counter[str] = Counter()
        self.puts: Counter[str] = Counter()
        self.marks: list[tuple[str, str]] = []

    def _store(self, table: str, item: dict[str, Any]) -> None:
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        if table != self.control_table:
            grouped = "b" in item and pk.startswith(GROUP_PK_PREFIX)
            kind = "dense marks" if sk.startswith(DENSE_MARK_PREFIX) else "group items" if grouped else "blocks"
        elif pk.startswith("occupancy#"):
            kind = "occupancy"
        elif pk.startswith("rollmark#"):
            kind = "rollup marks"
        else:
            kind = "other control items"
        if kind == "dense marks":
            self.marks.append((pk, sk))
        self.units[kind] += write_units(_size(item))
        self.puts[kind] += 1
        self.partitions.setdefault((table, pk), {})[sk] = item


def fleet_groups(fleet: Fleet, batch_s: float) -> tuple[int, float]:
    """(G auto, readings/s to the write tier) of ``fleet``: its sensors write to the write tier unless a batch
    holds DENSE_READINGS of theirs; hot entities are dense."""
    sparse_rate = fleet.fleet_rate if batch_s * 1_000 / fleet.interval_ms < DENSE_READINGS else 0.0
    return write_tier.auto_groups(fleet, sparse_rate, batch_s), sparse_rate


def entities_of(fleet: Fleet, tier: WriteTier, groups: int, deployment: Deployment) -> list[str]:
    """The entities simulated: every sensor of the first ``groups`` groups (seed 000: its hot partition's)."""
    if fleet is SEED_000:
        return blocks.seed_000_sample(deployment)
    return [s for s in map(fleet.sensor, range(fleet.sensors)) if tier.group_of(s) < groups]


def stream_shard(key: str) -> int:
    """The stream shard of a partition key, as Kinesis maps keys (MD5)."""
    digest = hashlib.md5(key.encode()).digest()  # noqa: S324 - Kinesis's own key hash
    return int.from_bytes(digest, "big") * STREAM_SHARDS >> 128


def batches_of(
    fleet: Fleet, arrivals: dict[str, list[Arrival]], tier: WriteTier, batch_ms: float, duration_ms: int
) -> list[list[Arrival]]:
    """Each stream shard's batches (readings in arrival order) wholly in the steady state, in time order."""
    rng = random.Random(1)
    by_shard: dict[int, list[Arrival]] = defaultdict(list)
    for entity, mine in arrivals.items():
        by_shard[stream_shard(tier.partition_key(entity))].extend(mine)
    out: list[tuple[float, list[Arrival]]] = []
    for _, mine in sorted(by_shard.items()):
        phase = rng.uniform(0, batch_ms)
        numbered: dict[int, list[Arrival]] = defaultdict(list)
        for arrival in sorted(mine, key=lambda a: a.at_ms):
            numbered[math.floor((arrival.at_ms - phase) / batch_ms)].append(arrival)
        for number, batch in sorted(numbered.items()):
            opens = phase + number * batch_ms
            if opens >= blocks.JITTER_MS and opens + batch_ms <= duration_ms:
                out.append((opens + batch_ms, batch))
    return [batch for _, batch in sorted(out, key=lambda pair: pair[0])]


def lambda_event(batch: list[Arrival], packer: Packer, first_sequence: int) -> dict[str, Any]:
    """The Lambda event of one batch: its readings packed into records as the producer packs them."""
    records = [r for a in batch for r in packer.add(a.reading.to_json())] + packer.flush()
    return {
        "Records": [
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": record.partition_key,
                    "sequenceNumber": str(first_sequence + n),
                    "data": base64.b64encode(record.data).decode("ascii"),
                    "approximateArrivalTimestamp": START_MS / 1000,
                },
                "eventSource": "aws:kinesis",
                "eventID": f"shardId-000000000000:{first_sequence + n}",
                "eventSourceARN": "arn:aws:kinesis:eu-west-1:123456789012:stream/readings",
                "awsRegion": "eu-west-1",
            }
            for n, record in enumerate(records)
        ]
    }


def run_fleet(fleet: Fleet, quick: bool) -> dict[str, float]:
    """Ingest the fleet's simulated batches through the real Ingestor; its figures per reading."""
    deployment = Deployment.defaults()
    reading_json = len(json.dumps(_sample(fleet).to_json(), separators=(",", ":"))) + 1
    rate_per_shard = (fleet.fleet_rate + sum(r for _, r in fleet.hot)) / STREAM_SHARDS
    batch_ms = min(WINDOW_S * 1_000, blocks.PAYLOAD_BYTES / (rate_per_shard * reading_json) * 1_000)
    groups, sparse_rate = fleet_groups(fleet, batch_ms / 1_000)
    tier = WriteTier(groups)
    duration = {SEED_000.name: 22_000 if quick else 62_000, SEED_003.name: 300_000 if quick else 600_000}.get(
        fleet.name, 900_000 if quick else 1_800_000
    )
    entities = entities_of(fleet, tier, 2 if quick else 4, deployment)
    batches = batches_of(fleet, blocks.arrivals(fleet, entities, duration, deployment, 3), tier, batch_ms, duration)
    dynamo, readings = ingest_all(batches, groups)
    out: dict[str, float] = {
        "groups": groups,
        "batch_s": batch_ms / 1_000,
        "entities_simulated": len(entities),
        "batches": len(batches),
        "readings": readings,
    }
    out |= _stored(dynamo, readings, fleet)
    for kind in KINDS:
        out[f"wu_per_reading {kind}"] = dynamo.units[kind] / readings
    out["wu_per_reading blocks"] = out.pop("blocks wu_per_reading, by rate")
    # A dense mark is put once per (entity, hour) by a container: over an hour, per reading of the fleet's
    # dense entities (the run is shorter than an hour: its marks are amortised as a deployment's would be).
    dense_entities = 0 if sparse_rate else fleet.sensors + len(fleet.hot)
    pairs = len({(pk, sk) for pk, sk in dynamo.marks})
    out["dense marks put per (entity, hour)"] = dynamo.puts["dense marks"] / pairs if pairs else 0.0
    marks = out["dense marks put per (entity, hour)"] * dense_entities / 3_600
    out["wu_per_reading dense marks, over an hour"] = marks / (fleet.fleet_rate + sum(r for _, r in fleet.hot))
    out["wu_per_reading ingest (group items, blocks, dense marks over an hour)"] = (
        out["wu_per_reading group items"]
        + out["wu_per_reading blocks"]
        + out["wu_per_reading dense marks, over an hour"]
    )
    return out | _models(fleet, groups, sparse_rate, batch_ms / 1_000)


def ingest_all(batches: list[list[Arrival]], groups: int) -> tuple[CountingDynamo, int]:
    """Every batch through one real Ingestor (a container), started when the batch closes."""
    settings = IngestSettings.from_env({**stack_env(), "WRITE_TIER_GROUPS": str(groups)})
    dynamo = CountingDynamo(settings.control_table or "")
    clock = {"now": START_MS}
    ingestor = Ingestor.from_settings(
        settings, dynamodb=dynamo, sqs=NullSQS(), control=dynamo, wall_clock_ms=lambda: clock["now"]
    )
    packer = Packer(strategy="group", groups=groups)
    sequence = blocks.SEQUENCE_BASE
    readings = 0
    try:
        for batch in batches:
            clock["now"] = START_MS + math.ceil(max(a.at_ms for a in batch))
            event = lambda_event(batch, packer, sequence)
            sequence += len(event["Records"])
            outcome = ingestor.ingest(parse_records(event), 900_000)
            assert outcome.written == len(batch) and not outcome.failed_records and not outcome.rejected
            readings += len(batch)
            metrics.clear_metrics()
    finally:
        ingestor.close()
        metrics.clear_metrics()
    return dynamo, readings


def _stored(dynamo: CountingDynamo, readings: int, fleet: Fleet) -> dict[str, float]:
    """Every reading decoded back from the group items and blocks (each once); their bytes per reading. Blocks'
    write units and bytes per reading weigh the fleet's sensors and its hot entities by their rates (the sample
    holds seed 000's hot sensor and the few sensors of its partition), as ``benchmarks.blocks`` does."""
    copies: dict[tuple[str, int, str], tuple[int, Reading]] = {}
    stored = {"group items": [0, 0, 0], "blocks": [0, 0, 0]}  # items, readings, billed bytes
    rates = {"fleet": fleet.fleet_rate, **dict(fleet.hot)}
    by_rate: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # readings, write units, billed bytes
    for (table, pk), rows in dynamo.partitions.items():
        if table == dynamo.control_table:
            continue
        for sk, item in rows.items():
            if "b" not in item:
                continue
            if pk.startswith(GROUP_PK_PREFIX):
                kind, (header, found) = "group items", decode_group(item["b"]["B"])
            else:
                parts = parse_keys(pk, sk, "hybrid")
                assert parts is not None
                kind, (header, found) = "blocks", decode_block(parts.entity, item["b"]["B"])
                part = by_rate[parts.entity if parts.entity in rates else "fleet"]
                part[0] += len(found)
                part[1] += parts.write_units
                part[2] += _size(item) + OVERHEAD
            tally = stored[kind]
            tally[0] += 1
            tally[1] += len(found)
            tally[2] += _size(item) + OVERHEAD
            keep_newest(copies, header.version, found)
    (group_items, in_groups, group_bytes), (block_items, in_blocks, _) = stored.values()
    assert len(copies) == readings == in_groups + in_blocks, "every reading stored once"
    at_rest = (KEEP_MS + SLICE_MS / 2) / (RETENTION_DAYS * 86_400_000)
    weight = sum(rates[name] for name in by_rate)
    block_wu = sum(rates[n] * units / count for n, (count, units, _) in by_rate.items()) / weight if weight else 0.0
    block_b = sum(rates[n] * billed / count for n, (count, _, billed) in by_rate.items()) / weight if weight else 0.0
    return {
        "blocks wu_per_reading, by rate": block_wu * in_blocks / readings,
        "readings_in_group_items": in_groups,
        "readings_in_blocks": in_blocks,
        "readings_per_group_item": in_groups / group_items if group_items else 0.0,
        "readings_per_block": in_blocks / block_items if block_items else 0.0,
        "billed_bytes group items, per reading in them": group_bytes / in_groups if in_groups else 0.0,
        "billed_bytes blocks, per reading in them": block_b,
        "billed_bytes at rest over the retention, group items per reading": group_bytes * at_rest / readings,
        "billed_bytes at rest over the retention, blocks per reading": block_b * in_blocks / readings,
    }


def _models(fleet: Fleet, groups: int, sparse_rate: float, batch_s: float) -> dict[str, float]:
    """The design table's model and tsctl plan's figures for the group items of ``fleet``."""
    if not sparse_rate:
        return {}
    occupied, held = poisson_fill(sparse_rate / groups * batch_s)
    per_item = max(1, round(held))
    size = write_tier.group_item_bytes(fleet, per_item, int(batch_s * 1_000))
    items = math.ceil(size / write_tier.MAX_ITEM_BYTES)
    model_wu = occupied * groups / batch_s * items * write_units(math.ceil(size / items)) / sparse_rate
    workload = Workload(
        peak_writes_per_s=fleet.fleet_rate,
        entities=fleet.sensors,
        sample=_sample(fleet),
        ingest=Ingest(batching_window_s=batch_s),
        retention_days=RETENTION_DAYS,
        write_tier_groups=groups,
    )
    plan = plan_capacity(workload).write_tier
    assert plan is not None
    return {
        "model readings_per_group_item": held,
        "model wu_per_reading group items": model_wu,
        "model billed_bytes group items, per reading in them": (size + write_tier.OVERHEAD) / per_item,
        "plan readings_per_group_item": plan.readings_per_item,
        "plan wu_per_reading group items": plan.group_write_units_per_reading,
        "plan billed_bytes group items, per reading in them": plan.group_item_bytes_per_reading,
    }


def _sample(fleet: Fleet) -> Reading:
    """A reading of the fleet, as its simulation makes them."""
    rng = random.Random(0)
    raw: dict[str, Any] = {"entity_id": fleet.sensor(0), "timestamp": START_MS, "measures": fleet.measures(rng)}
    if fleet.with_event_id:
        raw["event_id"] = f"{rng.getrandbits(48):012x}"
    return Reading.parse(raw)


def run(quick: bool = False) -> dict[str, dict[str, float]]:
    return {fleet.name: run_fleet(fleet, quick) for fleet in (SEED_000, SEED_003, SPARSE)}


@benchmark(
    "write-tier-ingest",
    "the write tier through the real Ingestor: write units and billed bytes per reading by kind, next to the models",
)
def write_tier_ingest(quick: bool) -> Result:
    figures = run(quick)
    result = Result(
        params={"window_s": WINDOW_S, "stream_shards": STREAM_SHARDS, "retention_days": RETENTION_DAYS, "quick": quick},
        method=(
            "simulated readings (benchmarks.blocks), published with the write tier's partition keys, cut into each "
            "stream shard's Lambda batches, ingested by the real Ingestor (stack defaults, WRITE_TIER_GROUPS = G auto) "
            "over the in-memory DynamoDB; every put's write units by kind; every reading decoded back once"
        ),
    )
    for fleet, row in figures.items():
        for name, value in row.items():
            unit = "WU" if "wu_" in name else "B" if "bytes" in name else ""
            result.add(f"{fleet}: {name}", round(value, 4), unit)
    return result


if __name__ == "__main__":
    for name, row in run().items():
        print(name)
        for key, value in row.items():
            print(f"  {key}: {value:,.4f}")
