"""Rollups against raw reads, and what maintaining them costs, at the seed scenario.

Measured in memory with the real code (ingest's :class:`MarkRecorder`, the
:class:`RollupRunner`, the :class:`QueryService`), the control table behind
:class:`doubles.memory_dynamo.MemoryDynamo` (DynamoDB's item-size and unit rules):

* ``writes``: E entities, each with readings in every minute for M minutes,
  ingested one batch per minute and rolled up every minute (1m, 1h, 1d);
  the write units of marks, rollups, totals and state per entity-minute,
  scaled to the seed's 10,000 sensors and set against its 50,000 raw WCU/s;
* ``(a)`` ``/entities/sensor-alpha-001/aggregates`` over 24 h at 1 minute,
  from 1,440 minute rollups as the seed rate (2,000/s) fills them;
* ``(b)`` ``/aggregates`` (every entity) over 7 days at 1 hour, from 168 hourly totals;
* ``keep-up``: one minute of the seed scenario's marks (10,000 entities) applied
  by one run of the rollup function as deployed (16 reads at once), with every
  DynamoDB call answering after 10 ms: the run's wall time against its 120 s.

The raw side of (a) and (b) is the key-design layer's arithmetic (too many
items to hold: 172.8 M and 30.24 G): every reading read once, 500 bytes
each (the seed item), Query pages of 1 MB, eventually consistent.

Run: ``python -m benchmarks rollups`` (harness) or ``.venv/bin/python -m benchmarks.rollups`` (prints JSON).
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from adapters.batch_writer import BatchWriter
from adapters.retry import Deadline
from adapters.rollup_store import MarkRecorder, RollupState, RollupStore
from adapters.shard_map_source import StaticShardMap
from benchmarks.harness import Result, benchmark
from benchmarks.query_fanout import Slow
from doubles.memory_dynamo import MemoryDynamo, MemoryReader
from keydesign import Layout, Reading, ShardMap, parse_timestamp, read_units
from keydesign.rollup import MARK_SHARDS, ROLLUP_SHARDS, Figures, Granularities
from query.cursor import CursorCodec
from query.logic import QueryService
from query.models import AggregateSeries
from query.params import TimeRange
from query.rollups import RollupAnswers
from query.settings import QueryLimits
from rollup.logic import RollupRunner

T0 = parse_timestamp("2026-11-22T00:00:00Z")
MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000
SEED_RATE, SEED_SENSORS, ALPHA_RATE, ITEM_BYTES = 50_000, 10_000, 2_000, 500
PAGE_BYTES = 1_048_576
LEVELS = Granularities.parse("1m,1h,1d")
CONTROL = "control"
LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
SHARD_MAPS = StaticShardMap(ShardMap.initial(LAYOUT.bucket, 100))


def _store(db: MemoryDynamo) -> RollupStore:
    return RollupStore(db, BatchWriter(db, concurrency=1), CONTROL, "readings", 30 * DAY)


def write_costs(entities: int, minutes: int, readings_per_minute: int = 6) -> dict[str, Any]:
    """Ingest and roll up ``entities`` x ``minutes``; write units by item kind and raw items re-read."""
    reader, db = MemoryReader(), MemoryDynamo(page_items=1000, get_limit=100)
    store = _store(db)
    now = [T0 - 5 * MINUTE]
    runner = RollupRunner(
        layout=LAYOUT, shard_maps=SHARD_MAPS, reader=reader, store=store, granularities=LEVELS,
        lateness_ms=HOUR, settle_ms=MINUTE, clock_ms=lambda: now[0], concurrency=1,
    )  # fmt: skip
    runner.run(Deadline.never())
    marks = MarkRecorder(store, MINUTE)
    readings, raw_read = 0, 0
    for minute in range(minutes):
        batch: list[tuple[int, str, int]] = []
        entries: list[tuple[Reading, int]] = []
        for e in range(entities):
            for n in range(readings_per_minute):
                ts = T0 + minute * MINUTE + n * (MINUTE // readings_per_minute)
                reading = Reading(entity_id=f"sensor-{e:05d}", event_id=f"{minute}-{n}", ts_ms=ts, measures={"v": n})
                entries.append((reading, minute))
                batch.append((len(batch), reading.entity_id, ts))
        reader.store(LAYOUT, SHARD_MAPS.current(), entries)  # the minute's readings as one ingest batch
        readings += len(batch)
        marks.write(batch, T0 + minute * MINUTE, Deadline.never())
        now[0] = T0 + (minute + 2) * MINUTE  # a run a minute after each minute closes
        raw_read = raw_read + runner.run(Deadline.never()).raw.items
    now[0] = T0 + (minutes + 26 * 60) * MINUTE  # past the last day's end: every deferred level applied
    runner.run(Deadline.never())
    runner.close()
    entity_minutes = entities * minutes
    units = {kind: db.write_units[kind] / entity_minutes for kind in ("rollmark", "rollup")}
    # Marks and rollups scale with entities; totals and the state put with intervals only.
    per_minute: float = (db.write_units["rollall"] + db.write_units["rollstate"]) / minutes
    seed_wcu = sum(units.values()) * SEED_SENSORS / 60 + per_minute / 60
    return {
        "entities": entities,
        "minutes": minutes,
        "readings": readings,
        "wcu_per_entity_minute": units,
        "totals_and_state_wcu_per_minute": per_minute,
        "seed_rollup_wcu_per_s": seed_wcu,
        "seed_raw_wcu_per_s": float(SEED_RATE),
        "seed_overhead_percent": 100 * seed_wcu / SEED_RATE,
        "wcu_per_reading_at_seed": seed_wcu / SEED_RATE,
        "raw_items_reread_per_reading": raw_read / readings,
        "rollup_rcu_per_reading_at_500_bytes": raw_read / readings * read_units(ITEM_BYTES * 8, consistent=True) / 8,
        # Ingest's marks of a minute spread over the minute; a run's puts (the minute's rollups, or at the
        # top of an hour every entity's deferred hour mark) land on one slot's or interval's keys at once.
        "hottest_mark_key_wcu_per_s": SEED_SENSORS / MARK_SHARDS / 60,
        "largest_burst_per_key_per_run": SEED_SENSORS / min(MARK_SHARDS, ROLLUP_SHARDS),
    }


def _raw(items: int, queries_at_least: int) -> dict[str, Any]:
    return {
        "items_read": items,
        "query_calls_at_least": max(queries_at_least, math.ceil(items * ITEM_BYTES / PAGE_BYTES)),
        "read_units": read_units(items * ITEM_BYTES),
    }


def read_costs() -> dict[str, Any]:
    db = MemoryDynamo(page_items=1000, get_limit=100)
    store = _store(db)
    alpha = Figures()
    alpha.add({"v": 1.0})
    alpha.readings = ALPHA_RATE * 60  # a minute of sensor-alpha-001 at the seed rate
    store.write(
        [store.rollup_write(MINUTE, T0 + m * MINUTE, "sensor-alpha-001", alpha) for m in range(1440)], Deadline.never()
    )
    every = Figures()
    every.add({"v": 1.0})
    every.readings = SEED_RATE * 3600
    store.write([store.rollup_write(HOUR, T0 + h * HOUR, None, every) for h in range(168)], Deadline.never())
    store.save_state(RollupState(T0 + 7 * DAY))
    service = QueryService(
        layout=LAYOUT,
        shard_maps=SHARD_MAPS,
        reader=MemoryReader(),
        cursors=CursorCodec(lambda: b"k" * 40),
        limits=QueryLimits(),
        clock_ms=lambda: T0 + 7 * DAY,
        rollups=RollupAnswers(store, LEVELS),
    )
    day = service.aggregates("sensor-alpha-001", TimeRange(T0, T0 + DAY), MINUTE)
    assert isinstance(day, AggregateSeries)
    week = service.total_aggregates(TimeRange(T0, T0 + 7 * DAY), HOUR)
    out: dict[str, Any] = {}
    for name, answer, raw in (
        ("a_alpha_24h_1m", day, _raw(ALPHA_RATE * 86_400, 24)),
        ("b_every_sensor_7d_1h", week, _raw(SEED_RATE * 7 * 86_400, 168 * 100)),
    ):
        cost = answer.cost
        out[name] = {
            "source": answer.source,
            "rollups": {"items_read": cost.items_read, "calls": cost.queries, "read_units": cost.read_units},
            "raw": raw,
        }
    return out


def keep_up(entities: int, latency_ms: float = 10.0, concurrency: int = 16) -> dict[str, Any]:
    """One run applying a minute in which each of ``entities`` sent readings (5 each: one Query page,
    as the seed's 300 of 500 bytes would be), every call slowed by ``latency_ms``."""
    memory, db = MemoryReader(), MemoryDynamo(page_items=1000, get_limit=100)
    reader, slow_db = Slow(memory, latency_ms), Slow(db, latency_ms)
    store = RollupStore(slow_db, BatchWriter(slow_db, concurrency=concurrency), CONTROL, "readings", 30 * DAY)
    minute = T0 + 30 * MINUTE
    batch: list[tuple[int, str, int]] = []
    entries: list[tuple[Reading, int]] = []
    for e in range(entities):
        for n in range(5):
            reading = Reading(entity_id=f"sensor-{e:05d}", event_id=str(n), ts_ms=minute + n * 1000, measures={"v": n})
            entries.append((reading, 1))
            batch.append((len(batch), reading.entity_id, reading.ts_ms))
    memory.store(LAYOUT, SHARD_MAPS.current(), entries)
    MarkRecorder(store, MINUTE).write(batch, minute, Deadline.never())
    store.save_state(RollupState(minute))
    runner = RollupRunner(
        layout=LAYOUT, shard_maps=SHARD_MAPS, reader=reader, store=store, granularities=LEVELS,
        lateness_ms=HOUR, settle_ms=MINUTE, clock_ms=lambda: minute + 2 * MINUTE, concurrency=concurrency,
    )  # fmt: skip
    calls = (reader.calls, slow_db.calls)
    started = time.perf_counter()
    report = runner.run(Deadline.after_ms(120_000))
    seconds = time.perf_counter() - started
    runner.close()
    assert report.slots == 1 and report.recomputed[MINUTE] == entities, report.summary()
    return {
        "entities": entities,
        "latency_ms": latency_ms,
        "concurrency": concurrency,
        "run_seconds": seconds,
        "steps": report.steps,
        "raw_queries": reader.calls - calls[0],
        "control_table_calls": slow_db.calls - calls[1],
        "share_of_the_run_budget_percent": 100 * seconds / 120,
    }


def run(quick: bool = False) -> dict[str, Any]:
    return {
        "writes": write_costs(20 if quick else 100, 60 if quick else 120),
        "reads": read_costs(),
        "keep_up": keep_up(1_000 if quick else SEED_SENSORS),
    }


def to_result(figures: dict[str, Any]) -> Result:
    writes = figures["writes"]
    result = Result(
        params={"entities": writes["entities"], "minutes": writes["minutes"], "granularities": "1m,1h,1d"},
        method=(
            "the real mark writer, rollup function and query service in memory (DynamoDB's item-size and unit "
            "rules); write units per entity-minute scaled to 10,000 sensors / 50,000 readings/s; raw reads are "
            "the key-design arithmetic (500-byte items, 1 MB pages, eventually consistent)"
        ),
    )
    result.add("rollup write units at the seed rate", writes["seed_rollup_wcu_per_s"], "WCU/s")
    result.add("rollup writes vs raw writes", writes["seed_overhead_percent"], "%", "target <= 5%")
    result.add("raw items re-read by the rollup function", writes["raw_items_reread_per_reading"], "per reading")
    result.add("hottest mark key (ingest)", writes["hottest_mark_key_wcu_per_s"], "WCU/s", "limit 1,000")
    result.add("largest burst on one key per run", writes["largest_burst_per_key_per_run"], "puts", "once a minute")
    for name, case in figures["reads"].items():
        for side in ("rollups", "raw"):
            figures_of = case[side]
            result.add(f"{name} {side}: items read", figures_of["items_read"], "items")
            result.add(f"{name} {side}: read units", figures_of["read_units"], "RCU")
            calls = figures_of.get("calls", figures_of.get("query_calls_at_least"))
            result.add(f"{name} {side}: calls", calls, "calls", "at least" if side == "raw" else "")
    keep = figures["keep_up"]
    note = f"{keep['entities']:,} entity-minutes, {keep['latency_ms']:g} ms a call, {keep['concurrency']} at once"
    result.add("one seed minute applied by one run", round(keep["run_seconds"], 2), "s", note)
    result.add("one seed minute: raw Query calls", keep["raw_queries"], "calls")
    result.add("one seed minute: control-table calls", keep["control_table_calls"], "calls")
    return result


@benchmark("rollups", "raw vs rollups: 24 h of sensor-alpha-001 at 1 m, 7 d of every sensor at 1 h, write overhead")
def rollups(quick: bool) -> Result:
    return to_result(run(quick=quick))


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
