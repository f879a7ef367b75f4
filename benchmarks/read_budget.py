"""What a page of a long, mostly empty range costs under the page budget.

The default deployment's key design (hybrid layout, 100 shards, 1-hour
buckets) over an in-memory table, every Query call given a 20 ms round trip
(:class:`benchmarks.query_fanout.Slow`). Three reads, as
``GET /readings`` and ``GET /entities/{id}/readings`` issue them:

* ``range_1d``: every entity, an empty day (2,400 partitions);
* ``range_31d``: every entity, an empty 31 days (74,400 partitions);
* ``entity_31d``: one entity over 31 days, holding one reading at the end
  (744 partitions).

* ``aggregate_31d``: ``/aggregates`` of that entity over 31 days, 1-hour intervals.

For each: Query calls and wall time of the first page, with MAX_QUERY_CALLS at
its default (200) and, for the two shorter reads, unbounded (the behaviour
before the page budget), side by side; and, where it is short enough to walk,
the pages, calls and time of following the cursors to the end of the range.
Every read is also measured with occupancy records (``pruned``): the control
table, in memory behind the same 20 ms per call, holds the record ingest
writes for the one reading and a ``since`` marker older than the ranges.

And what reading a day of one entity costs, in read units per reading returned
(``entity_day``): the entity reports 1, 5 or 10 times a second for the whole day,
its readings stored as ingest stores them (a block per ingest batch: batches
of 1, 5 or 10 s of its readings, ``Layout.pack``; 5 a second in 5 s batches is
a seed sensor under the default batching window), and a client follows the
cursors of ``/entities/{id}/readings`` over the day with pages of 1,000. Read
units are DynamoDB's (the blocks' item sizes, 4 KB units, eventually
consistent), as :class:`doubles.memory_dynamo.MemoryReader` reports them.
Beside each, what the same readings cost stored one item per reading (the item
a reading had before blocks, :func:`keydesign.legacy.legacy_item`): at least their
bytes over 4 KB, halved (the floor: every Query rounds up, and pages overlap).
The deployment is the stack's defaults (:meth:`benchmarks.blocks.Deployment.defaults`).

And what one seed 003 device's reads cost with the write tier on (``device``): 1,000,000 devices
reporting once every 259 s, in ``WRITE_TIER_GROUPS`` (32) groups, so the device's group of
31,250 sends 121 readings a second; its hour before NOW is in the write tier (compaction has not
reached it: the worst case, at an hour's start), the 23 before it compacted. The group's hour is
stored as ingest stores it (``doubles/tier_items.py``: one batch per 10 s window, its group
items), the device's earlier hours as compaction writes them (a compacted block an hour). Read
units of ``latest``, the last 10 minutes and the day (pages of 1,000), eventually consistent,
beside the same device with every reading in a block of its own (the write tier off), and with
the hour's settled slices re-packed into sub-items (``repacked``: ``keydesign.tiering.repack_slice``
through the slice that ended 10 minutes before NOW, the state a run leaves a schedule period before
the next one: the newest 10 minutes read from the group items), and what those sub-items cost to
write per reading they hold.

Run: ``python -m benchmarks read-budget`` (harness) or
``.venv/bin/python -m benchmarks.read_budget`` (prints JSON).
"""

from __future__ import annotations

import bisect
import itertools
import json
import random
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

from adapters.batch_writer import serialize_item
from adapters.observability import logger, metrics
from adapters.occupancy import OccupancyReader, OccupancyStore
from adapters.partition_reader import Page, PageRequest
from benchmarks.blocks import Deployment, old_item
from benchmarks.harness import Result, benchmark
from benchmarks.query_fanout import NOW, Slow, page_of, timed_service
from doubles.memory_dynamo import SEQUENCE_BASE, MemoryDynamo, MemoryReader
from doubles.tier_items import FixedWatermark, TierWriter
from keydesign import Block, Layout, Reading, ShardMap, item_size
from keydesign.capacity import Workload, plan_capacity
from keydesign.occupancy import OccupancyRecord
from keydesign.timefmt import format_ts
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    COMPACTED_PK_SUFFIX,
    GROUP_PK_PREFIX,
    REPACK_MS,
    SUB_PK_PREFIX,
    WriteTier,
    cluster_of,
    repack_start,
    tier_settle,
)
from query.errors import ScanLimitExceeded
from query.logic import QueryService
from query.models import AggregateSeries, Explanation, ReadingsPage
from query.params import PageArgs, TimeRange
from query.settings import DEFAULT_LIMIT, QueryLimits

HOUR = 3_600_000
DAY = 24 * HOUR
SHARDS = 100
ENTITY = "sensor-once"
UNBOUNDED = 100_000
#: entity_day: readings a second, and seconds of them one ingest batch (so one block) holds.
DAY_CASES = ((1, 1), (5, 5), (10, 1), (10, 10))
DAY_ENTITY = "sensor-day"


def _service(max_query_calls: int, latency_ms: float, *, pruned: bool = False) -> QueryService:
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, SHARDS)
    memory = MemoryReader()
    once = Reading(ENTITY, "only", NOW - 30 * 60_000, {"v": 1})
    (block,) = memory.store(layout, shard_map, [(once, 1)])
    key = block.key
    occupancy = None
    if pruned:
        # Behind the same round trip as a readings Query.
        control = MemoryDynamo()
        store = OccupancyStore(Slow(control, latency_ms), "control", layout.table_prefix)
        store.mark_since(NOW - 60 * DAY)  # recording started before every range read here
        record = OccupancyRecord.of(layout.table_prefix, layout.bucket, key.table, key.pk, once.ts_ms)
        control.put_item(TableName="control", Item=serialize_item(record.item(30 * DAY)))
        occupancy = OccupancyReader(store)
    return timed_service(
        layout, shard_map, memory, latency_ms, QueryLimits(max_query_calls=max_query_calls), occupancy=occupancy
    )


def _aggregate(service: QueryService) -> dict[str, Any]:
    """One 31-day aggregate on 1-hour intervals: its Query calls, or the 413 it answers."""
    try:
        series = service.aggregates(ENTITY, TimeRange(NOW - 31 * DAY, NOW), HOUR, time_left_ms=28_000)
    except ScanLimitExceeded as exc:
        return {"answer": "413", "why": str(exc)}
    finally:
        metrics.clear_metrics()
    if not isinstance(series, AggregateSeries):
        raise TypeError("expected a series")
    return {"answer": "200", "queries": series.cost.queries, "readings": series.readings}


def _page(service: QueryService, case: str, cursor: str | None) -> ReadingsPage:
    days = 1 if case == "range_1d" else 31
    # The one reading is in the last hour: the cross-entity ranges end before it.
    end_ms = NOW if case == "entity_31d" else NOW - HOUR
    page_args = PageArgs(TimeRange(end_ms - days * DAY, end_ms), DEFAULT_LIMIT, cursor)
    if case == "entity_31d":
        return page_of(partial(service.entity_readings, ENTITY, page_args, time_left_ms=28_000))
    return page_of(partial(service.range_readings, page_args, time_left_ms=28_000))


def _measure(case: str, max_query_calls: int, latency_ms: float, walk: bool, *, pruned: bool = False) -> dict[str, Any]:
    service = _service(max_query_calls, latency_ms, pruned=pruned)
    figures: dict[str, Any] = {"case": case, "pruned": pruned, "max_query_calls": max_query_calls}
    started = time.perf_counter()
    if case == "aggregate_31d":
        answer = _aggregate(service)
        return {
            **figures,
            "first_page_queries": answer.get("queries"),
            "first_page_ms": round((time.perf_counter() - started) * 1000, 1),
            "first_page_complete": answer["answer"] == "200",
            "answer": answer["answer"],
        }
    first = _page(service, case, None)
    figures |= {
        "first_page_queries": first.cost.queries,
        "first_page_ms": round((time.perf_counter() - started) * 1000, 1),
        "first_page_complete": first.complete,
    }
    if walk:
        pages, calls, found, page = 1, first.cost.queries, first.count, first
        while page.next_cursor is not None:
            page = _page(service, case, page.next_cursor)
            pages, calls, found = pages + 1, calls + page.cost.queries, found + page.count
        figures.update(
            walk_pages=pages,
            walk_queries=calls,
            walk_ms=round((time.perf_counter() - started) * 1000, 1),
            walk_readings=found,
        )
    return figures


def _day_readings(rate: int, hours: int) -> list[Reading]:
    """``hours`` of DAY_ENTITY at ``rate`` readings a second, ending at NOW: three measures and a site."""
    rng = random.Random(rate)
    start, step = NOW - hours * HOUR, 1000 // rate
    return [
        Reading(
            DAY_ENTITY,
            f"evt-{n:08d}",
            start + n * step,
            {
                "temp": round(20 + 5 * rng.random(), 2),
                "rh": rng.randrange(30, 60),
                "battery": round(3 + rng.random() / 5, 3),
            },
            {"site": "plant-7"},
        )
        for n in range(hours * 3600 * rate)
    ]


def entity_day(rate: int, batch_s: int, hours: int = 24) -> dict[str, Any]:
    """Read units per reading of following one entity's day (``hours`` of data) with pages of 1,000."""
    deployment = Deployment.defaults()  # the stack's: hybrid, 100 shards, 1-hour buckets, 30 days
    layout, shard_map = deployment.layout, deployment.shard_map
    memory = MemoryReader()
    readings = _day_readings(rate, hours)
    batch = rate * batch_s
    for at in range(0, len(readings), batch):
        entries = [(r, SEQUENCE_BASE + at) for r in readings[at : at + batch]]
        memory.store(layout, shard_map, entries, retention_ms=deployment.retention_ms)
    service = timed_service(layout, shard_map, memory, 0.0, QueryLimits(), retention_ms=deployment.retention_ms)
    units, returned, pages, calls = 0.0, 0, 0, 0
    cursor: str | None = None
    started = time.process_time()
    while True:
        page = page_of(partial(service.entity_readings, DAY_ENTITY, PageArgs(TimeRange(NOW - DAY, NOW), 1000, cursor)))
        units, returned, pages, calls = (
            units + page.cost.read_units,
            returned + page.count,
            pages + 1,
            calls + page.cost.queries,
        )
        cursor = page.next_cursor
        if cursor is None:
            break
    cpu_s = time.process_time() - started
    if returned != len(readings):
        raise AssertionError(f"the day's pages returned {returned} of {len(readings)} readings")
    blocks = [row for rows in memory.partitions.values() for row in rows]
    one_item_floor = sum(item_size(old_item(r, deployment)) for r in readings) / 4096 / 2
    return {
        "rate_per_s": rate,
        "batch_s": batch_s,
        "hours": hours,
        "readings": returned,
        "blocks": len(blocks),
        "block_bytes_per_reading": sum(row.size for row in blocks) / returned,
        "pages": pages,
        "queries": calls,
        "read_units": units,
        "units_per_reading": units / returned,
        "one_item_units_per_reading": one_item_floor / returned,
        "fewer": one_item_floor / units,
        "cpu_us_per_reading": cpu_s * 1e6 / returned,
    }


#: device: seed 003's fleet, its interval, and the stack's group count (cdk.json write_tier_groups).
FLEET, INTERVAL_MS, GROUPS = 1_000_000, 259_000, 32
#: The groups `tsctl plan` prints for seed 003 with a 12-character event id (G auto;
#: tests/unit/keydesign/test_capacity_write_tier.py).
SEED_003_AUTO_GROUPS = 1_024
DEVICE = "device-0000001"
#: The issue's seed 003 reading (`tsctl plan --reading`): one measure, no event id.
ISSUE_READING = Reading.parse({"entity_id": DEVICE, "timestamp": format_ts(NOW), "measures": {"value": 21.53}})
TIER_BATCH_MS = 10_000


#: Compaction's settle time (the stack's default): a slice is re-packed once it has.
SETTLE_MS = 180_000


class _KindReader(MemoryReader):
    """A MemoryReader that adds up its pages' read units by the kind of partition they read."""

    def __init__(self) -> None:
        super().__init__()
        self.units: dict[str, float] = {}

    def read_page(self, request: PageRequest) -> Page:
        page = super().read_page(request)
        pk = request.partition.pk
        kind = (
            "compacted"
            if pk.endswith(COMPACTED_PK_SUFFIX) or pk.startswith(CLUSTER_PK_PREFIX)
            else "sub_items"
            if pk.startswith(SUB_PK_PREFIX)
            else "group_items"
            if pk.startswith(GROUP_PK_PREFIX)
            else "blocks"
        )
        self.units[kind] = self.units.get(kind, 0.0) + page.read_units
        return page


def _device_costs(service: QueryService, memory: _KindReader) -> dict[str, float]:
    """Read units of the device's latest reading, its last 10 minutes and its day (pages of 1,000); the
    day's by the kind of partition read (``day_<kind>``)."""
    started = time.process_time()
    latest = service.latest(DEVICE)
    cpu_s = time.process_time() - started
    assert not isinstance(latest, Explanation) and latest.reading is not None
    costs = {"latest": latest.cost.read_units, "latest_queries": latest.cost.queries, "latest_cpu_ms": cpu_s * 1000}
    for name, span in (("last_10_min", 600_000), ("day", DAY)):
        units, queries, returned, cursor = 0.0, 0, 0, None
        memory.units.clear()
        started = time.process_time()
        while True:
            page = page_of(partial(service.entity_readings, DEVICE, PageArgs(TimeRange(NOW - span, NOW), 1000, cursor)))
            units, queries, cursor = units + page.cost.read_units, queries + page.cost.queries, page.next_cursor
            returned += page.count
            if cursor is None:
                break
        costs[name], costs[f"{name}_queries"], costs[f"{name}_readings"] = units, queries, returned
        costs[f"{name}_cpu_ms"] = (time.process_time() - started) * 1000
    costs.update({f"day_{kind}": round(units, 2) for kind, units in sorted(memory.units.items())})
    return costs


def device(
    quick: bool = False, groups: int = GROUPS, *, context: Mapping[str, object] | None = None, event_ids: bool = True
) -> dict[str, Any]:
    """Read units of one seed 003 device's latest, last 10 minutes and day: write tier (``groups``
    groups) against blocks, on the stack's defaults with ``context`` (cdk.json keys) over them; readings
    with a 12-character event id, or (``event_ids`` False) none, as the issue's reading."""
    deployment = Deployment.defaults(context)

    def reading(entity: str, ts: int, value: float) -> Reading:
        if event_ids:
            return Reading(entity, f"e{ts}", ts, {"value": value})
        return Reading.parse({"entity_id": entity, "timestamp": format_ts(ts), "measures": {"value": value}})

    layout, shard_map, retention = deployment.layout, deployment.shard_map, deployment.retention_ms
    tier = WriteTier(groups)
    group = tier.group_of(DEVICE)
    per_group = FLEET // groups // (10 if quick else 1)
    rng = random.Random(3)
    # The group's members (the device among them), each at its own phase of the interval.
    names = (f"device-{n:07d}" for n in range(2, FLEET + 1))
    members = [DEVICE, *itertools.islice((m for m in names if tier.group_of(m) == group), per_group - 1)]
    hour = NOW - HOUR  # in the write tier; the 23 hours before it compacted
    readings = [
        reading(entity, ts, round(rng.uniform(0, 40), 2))
        for entity in members
        for ts in range(hour + rng.randrange(INTERVAL_MS), NOW, INTERVAL_MS)
    ]
    readings.sort(key=lambda r: r.ts_ms)
    tiered, blocks = _KindReader(), _KindReader()
    writer = TierWriter(layout, tier, shard_map, retention)
    times = [r.ts_ms for r in readings]  # sorted: each batch is a slice of them
    for n, at in enumerate(range(hour, NOW, TIER_BATCH_MS)):
        run = readings[bisect.bisect_left(times, at) : bisect.bisect_left(times, at + TIER_BATCH_MS)]
        batch = [(r, SEQUENCE_BASE + n) for r in run]
        for table, item in writer.ingest(batch, at + TIER_BATCH_MS):
            tiered.add_item(table, item)
    # The earlier hours: the device's cluster (the group's members of its cluster: what its cluster blocks
    # hold), each member at its phase, compacted as compaction compacts them.
    phases = {r.entity_id: r.ts_ms % INTERVAL_MS for r in reversed(readings)}
    mates = [m for m in members if cluster_of(m) == cluster_of(DEVICE)]
    own = [r for r in readings if r.entity_id == DEVICE]
    own_writer = TierWriter(layout, tier, shard_map, retention)
    for start in range(NOW - DAY, hour, HOUR):
        earlier = [
            reading(mate, ts, 21.5) for mate in mates for ts in range(start + phases[mate], start + HOUR, INTERVAL_MS)
        ]
        for n, r in enumerate(sorted(earlier, key=lambda r: r.ts_ms)):  # one reading a batch, as devices send
            own_writer.ingest([(r, SEQUENCE_BASE + n)], r.ts_ms + 1_000)
        for table, item in own_writer.compact(start):
            tiered.add_item(table, item)
        own = [r for r in earlier if r.entity_id == DEVICE] + own
    written = []  # the write tier off: a block of each reading (the device sends one a batch)
    for r in own:
        written += blocks.store(layout, shard_map, [(r, SEQUENCE_BASE)], retention_ms=retention)
    repacked = _KindReader()  # the write tier and, beside its group items, the settled slices' sub-items
    repacked.partitions = {key: list(rows) for key, rows in tiered.partitions.items()}
    repacked.tables = set(tiered.tables)
    repacked_through = repack_start(NOW - REPACK_MS - tier_settle(SETTLE_MS))
    subs = [item for start in range(hour, repacked_through, REPACK_MS) for item in writer.repack(start)]
    for table, item in subs:
        repacked.add_item(table, item)
    # what the re-pack writes, per reading of the slices it re-packed (a put's units are its sort key's last part)
    repacked_readings = sum(hour <= r.ts_ms < repacked_through for r in readings)
    for memory in (tiered, blocks, repacked):
        memory.tables.update(layout.table_for(t) for t in range(NOW - DAY, NOW + HOUR, HOUR))
    service = partial(timed_service, layout, shard_map, latency_ms=0.0, limits=QueryLimits(), retention_ms=retention)
    tier_service = service(tiered, write_tier=tier, watermark=FixedWatermark(hour, groups))
    with_repack = partial(service, write_tier=tier, watermark=FixedWatermark(hour, groups, (hour, repacked_through)))
    repacked_service = with_repack(repacked)
    block_service = service(blocks)
    # The same reads pruned by occupancy records (as ingest records them: a block's partition and day; the
    # write tier's partitions have none and are never pruned). The sparse fleet here writes no block.
    pruned_service = with_repack(repacked, occupancy=_occupancy(layout, []))
    pruned_blocks = service(blocks, occupancy=_occupancy(layout, written))
    group_items = [row for (_, pk), rows in tiered.partitions.items() if pk.startswith("w#") for row in rows]
    return {
        "devices": FLEET,
        "interval_s": INTERVAL_MS // 1000,
        "groups": groups,
        "group_devices": len(members),
        "group_readings_per_s": round(len(readings) / 3600, 1),
        "group_items_in_the_hour": len(group_items),
        "group_item_bytes": round(sum(row.size for row in group_items) / max(1, len(group_items))),
        "sub_items_written": len(subs),
        "sub_item_bytes": round(sum(item_size(item) for _, item in subs) / max(1, len(subs))),
        "sub_item_write_units_per_reading": sum(int(str(item["sk"]).rsplit("#", 1)[1]) for _, item in subs)
        / max(1, repacked_readings),
        # the target's yardstick: the device's day as one item per reading (before blocks), at least its bytes
        # over 4 KB, halved (one Query, no rounding)
        "one_item_day_floor": sum(item_size(old_item(r, deployment)) for r in own) / 4096 / 2,
        "write_tier": _device_costs(tier_service, tiered),
        "repacked": _device_costs(repacked_service, repacked),
        "blocks": _device_costs(block_service, blocks),
        "repacked_pruned": _device_costs(pruned_service, repacked),
        "blocks_pruned": _device_costs(pruned_blocks, blocks),
    }


def _occupancy(layout: Layout, blocks: list[Block]) -> OccupancyReader:
    """Occupancy records of ``blocks`` in an in-memory control table, recorded since 60 days before NOW."""
    control = MemoryDynamo()
    store = OccupancyStore(control, "control", layout.table_prefix)
    store.mark_since(NOW - 60 * DAY)
    for block in blocks:
        record = OccupancyRecord.of(
            layout.table_prefix, layout.bucket, block.key.table, block.key.pk, block.readings[0].ts_ms
        )
        control.put_item(TableName="control", Item=serialize_item(record.item(30 * DAY)))
    return OccupancyReader(store)


def run(latency_ms: float = 20.0, quick: bool = False) -> dict[str, Any]:
    level = logger.log_level
    logger.setLevel("WARNING")
    try:
        cases = [
            _measure("range_1d", 200, latency_ms, walk=True),
            _measure("range_1d", UNBOUNDED, latency_ms, walk=False),
            _measure("entity_31d", 200, latency_ms, walk=True),
            _measure("entity_31d", UNBOUNDED, latency_ms, walk=False),
        ]
        if not quick:
            cases.append(_measure("range_31d", 200, latency_ms, walk=False))
        cases.append(_measure("aggregate_31d", 200, latency_ms, walk=False))
        # The same reads with occupancy records: empty partitions are skipped.
        for case in ("range_1d", "range_31d", "entity_31d", "aggregate_31d"):
            cases.append(_measure(case, 200, latency_ms, walk=case != "aggregate_31d", pruned=True))
        days = [entity_day(rate, batch_s, hours=1 if quick else 24) for rate, batch_s in DAY_CASES]
        seed_003 = device(quick)
        # ... and at the group count `tsctl plan` gives seed 003 (G auto: keydesign.capacity.auto_groups).
        seed_003_auto = device(quick, groups=SEED_003_AUTO_GROUPS)
        # ... and as `tsctl plan` lays out the issue's seed 003 (its reading, no event id): its G, table
        # period and bucket
        plan = plan_capacity(Workload(peak_writes_per_s=3_858.0, entities=FLEET, sample=ISSUE_READING))
        assert plan.write_tier is not None
        planned = {"table_period": plan.table_period, "bucket": plan.bucket}
        seed_003_planned = device(quick, groups=plan.write_tier.groups, context=planned, event_ids=False)
        seed_003_planned["layout"] = planned
    finally:
        logger.setLevel(level)
    return {
        "benchmark": "read_budget",
        "latency_ms_per_query": latency_ms,
        "shards": SHARDS,
        "bucket": "1h",
        "cases": cases,
        "entity_day": days,
        "device": seed_003,
        "device_g_auto": seed_003_auto,
        "device_planned": seed_003_planned,
        "command": ".venv/bin/python -m benchmarks.read_budget",
    }


def to_result(figures: dict[str, Any]) -> Result:
    latency = figures["latency_ms_per_query"]
    result = Result(
        params={"latency_ms_per_query": latency, "shards": figures["shards"], "bucket": figures["bucket"]},
        method=(
            f"QueryService over an in-memory table (hybrid, {figures['shards']} shards, 1h buckets) wrapped to "
            f"sleep {latency:g} ms per Query call, 28 s of function time left; first page of each read with "
            "MAX_QUERY_CALLS 200 and unbounded, and the cursors followed to the end where noted; 'occupancy': "
            "the same reads pruned by occupancy records in an in-memory control table behind the same latency "
            "(a cold cache: every day's record is read)"
        ),
    )
    for case in figures["cases"]:
        cap = "unbounded" if case["max_query_calls"] == UNBOUNDED else f"cap {case['max_query_calls']}"
        where = f"{case['case']}, {cap}" + (", occupancy" if case.get("pruned") else "")
        if case["case"] == "aggregate_31d":
            answer = "413" if case["answer"] == "413" else f"200, {case['first_page_queries']} Query calls"
            result.add(f"{where}: answer", case["first_page_ms"], "ms", answer)
            continue
        note = "complete" if case["first_page_complete"] else "cut short"
        calls = f"{case['first_page_queries']} Query calls, {note}"
        result.add(f"{where}: first page", case["first_page_ms"], "ms", calls)
        if "walk_pages" in case:
            result.add(
                f"{where}: whole range",
                case["walk_ms"],
                "ms",
                f"{case['walk_pages']} pages, {case['walk_queries']} Query calls, {case['walk_readings']} readings",
            )
    for day in figures["entity_day"]:
        where = f"entity_day, {day['rate_per_s']}/s in {day['batch_s']} s batches"
        shape = (
            f"{day['readings']:,} readings over {day['hours']} h in {day['blocks']:,} blocks "
            f"({day['block_bytes_per_reading']:.0f} bytes a reading), {day['pages']} pages, "
            f"{day['queries']} Query calls"
        )
        result.add(f"{where}: read units per reading", round(day["units_per_reading"], 5), "RCU", shape)
        result.add(f"{where}: one item per reading, at least", round(day["one_item_units_per_reading"], 5), "RCU")
        result.add(f"{where}: fewer read units than one item per reading", round(day["fewer"], 1), "x")
        result.add(f"{where}: query CPU per reading", round(day["cpu_us_per_reading"], 1), "us")
    seed = figures["device"]
    shape = (
        f"{seed['devices']:,} devices every {seed['interval_s']} s, {seed['groups']} groups: the device's group "
        f"{seed['group_devices']:,} devices, {seed['group_readings_per_s']} readings/s, "
        f"{seed['group_items_in_the_hour']} group items in its hour of about {seed['group_item_bytes']:,} bytes"
    )
    for read in ("latest", "last_10_min", "day"):
        for store in ("write_tier", "repacked", "repacked_pruned", "blocks", "blocks_pruned"):
            costs = seed[store]
            note = f"{costs[read + '_queries']} Query calls" + (
                "; " + shape if read == "latest" and store == "write_tier" else ""
            )
            result.add(
                f"device (seed 003), {read}, {store.replace('_', ' ')}: read units", round(costs[read], 1), "RCU", note
            )
            result.add(
                f"device (seed 003), {read}, {store.replace('_', ' ')}: query CPU",
                round(costs[read + "_cpu_ms"], 2),
                "ms",
                f"{costs.get(read + '_readings', 1)} readings returned",
            )
    planned = figures["device_planned"]
    where = (
        f"device (seed 003) as `tsctl plan` lays it out ({planned['groups']} groups, "
        f"{planned['layout']['table_period']} tables, {planned['layout']['bucket']} buckets, no event id)"
    )
    for read in ("latest", "last_10_min", "day"):
        for store in ("repacked_pruned", "blocks_pruned"):
            costs = planned[store]
            result.add(
                f"{where}, {read}, {store.replace('_', ' ')}: read units",
                round(costs[read], 1),
                "RCU",
                f"{costs[read + '_queries']} Query calls",
            )
    result.add(
        f"{where}, day, one item per reading (before blocks), at least",
        round(planned["one_item_day_floor"], 2),
        "RCU",
        "its items' bytes over 4 KB, halved: one Query",
    )
    result.add(
        "device (seed 003), sub-items: write units per reading re-packed",
        round(seed["sub_item_write_units_per_reading"], 4),
        "WU",
        f"{seed['sub_items_written']} sub-items of about {seed['sub_item_bytes']:,} bytes",
    )
    return result


@benchmark("read-budget", "one page of empty 1-day/31-day ranges and a once-reporting entity, 20 ms per Query call")
def read_budget(quick: bool) -> Result:
    return to_result(run(quick=quick))


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
