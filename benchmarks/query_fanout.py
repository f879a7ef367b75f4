"""Fan-out benchmark of the query API: one page over k partitions, parallel vs sequential.

Every DynamoDB Query call is given a fixed latency (a wrapper around the
data-access interface sleeps ``latency_ms`` before answering from memory,
:class:`doubles.memory_dynamo.MemoryReader`), so the wall time measures
round trips, not the machine. The readings are stored as ingest stores them:
blocks of the readings one batch holds of an entity (``Layout.pack``), one
batch per ``BATCH_MS`` of event time. The same page is read
with the configured concurrency (all k partitions at once) and with a
concurrency of 1 (one partition after another); with parallel fan-out a page
costs about one round trip whatever k, sequentially about k.

Two shapes of fan-out are measured:

* ``entity_random``: one entity on the random layout with k suffixes;
* ``range_hybrid``: a cross-entity read of one bucket with k base shards.

Run: ``python -m benchmarks query-fanout`` (the harness: table and
``out/bench/results.json``), or ``.venv/bin/python -m benchmarks.query_fanout``
(prints JSON); ``run()`` returns the same figures as a dict.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from adapters.observability import logger, metrics
from adapters.shard_map_source import StaticShardMap
from benchmarks.harness import Result, benchmark
from doubles.memory_dynamo import SEQUENCE_BASE, MemoryReader
from keydesign import Layout, Reading, ShardMap, parse_timestamp
from query.cursor import CursorCodec
from query.logic import QueryService
from query.models import ReadingsPage
from query.params import PageArgs, TimeRange
from query.settings import QueryLimits

NOW = parse_timestamp("2026-11-22T12:00:00Z")
HOUR = 3_600_000
PAGE = 100
READINGS_PER_PARTITION = 40
#: Event time one ingest batch spans: its readings of an entity become one block (ingest's 1 s batching window).
BATCH_MS = 1_000


class Slow:
    """``target``'s methods, each answering after ``latency_ms`` (a network round trip); ``calls`` counts them."""

    def __init__(self, target: Any, latency_ms: float) -> None:
        self._target, self._latency_s = target, latency_ms / 1000
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            time.sleep(self._latency_s)
            return method(*args, **kwargs)

        return call


def timed_service(
    layout: Layout, shard_map: ShardMap, memory: MemoryReader, latency_ms: float, limits: QueryLimits, **extra: Any
) -> QueryService:
    """A query service over ``memory`` with ``latency_ms`` per Query call, at the fixed time NOW."""
    return QueryService(
        layout=layout,
        shard_maps=StaticShardMap(shard_map),
        reader=Slow(memory, latency_ms),
        cursors=CursorCodec(lambda: b"benchmark-cursor-key-0123456789abcdef"),
        limits=limits,
        clock_ms=lambda: NOW,
        **extra,
    )


def store_batches(
    reader: MemoryReader, layout: Layout, shard_map: ShardMap, readings: Sequence[Reading], rng: random.Random
) -> None:
    """Store ``readings`` as ingest would: one batch (a version) per BATCH_MS of event time."""
    batches: dict[int, list[tuple[Reading, int]]] = {}
    for reading in readings:
        batch = reading.ts_ms // BATCH_MS
        batches.setdefault(batch, []).append((reading, SEQUENCE_BASE + batch))
    for entries in batches.values():
        reader.store(layout, shard_map, entries, rng=rng)


def _setup(kind: str, partitions: int) -> tuple[Layout, ShardMap, MemoryReader]:
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, partitions)
    reader = MemoryReader()
    rng = random.Random(partitions)
    entities = ["sensor-1"] if kind == "random" else [f"sensor-{n:03d}" for n in range(4 * partitions)]
    readings = [
        Reading(entities[n % len(entities)], f"e{n:06d}", NOW - HOUR + rng.randrange(0, HOUR), {"v": n})
        for n in range(READINGS_PER_PARTITION * partitions)
    ]
    store_batches(reader, layout, shard_map, readings, rng)
    return layout, shard_map, reader


def page_of(read: Callable[[], object]) -> ReadingsPage:
    """The page ``read`` answers (explain is never asked for here), its metrics cleared: no handler flushes them."""
    try:
        page = read()
    finally:
        metrics.clear_metrics()
    if not isinstance(page, ReadingsPage):
        raise TypeError("expected a page of readings")
    return page


def _read_page(service: QueryService, kind: str) -> ReadingsPage:
    page_args = PageArgs(TimeRange(NOW - HOUR, NOW), PAGE)
    if kind == "random":
        return page_of(partial(service.entity_readings, "sensor-1", page_args))
    return page_of(partial(service.range_readings, page_args))


def _measure(kind: str, partitions: int, latency_ms: float, repeats: int) -> dict[str, Any]:
    layout, shard_map, memory = _setup(kind, partitions)
    figures: dict[str, Any] = {"shape": "entity_random" if kind == "random" else "range_hybrid"}
    figures["partitions"] = partitions
    pages: dict[str, list[str]] = {}
    for mode, concurrency in (("parallel", min(partitions, 64)), ("sequential", 1)):
        service = timed_service(layout, shard_map, memory, latency_ms, QueryLimits(concurrency=concurrency))
        times: list[float] = []
        page = _read_page(service, kind)  # warm-up: thread start-up, imports
        for _ in range(repeats):
            started = time.perf_counter()
            page = _read_page(service, kind)
            times.append((time.perf_counter() - started) * 1000)
        pages[mode] = [item.event_id for item in page.items]
        figures[f"{mode}_ms"] = round(statistics.median(times), 1)
        figures[f"{mode}_round_trips"] = round(statistics.median(times) / latency_ms, 2)
        figures["queries_per_page"] = page.cost.queries
    if pages["parallel"] != pages["sequential"]:
        raise AssertionError("parallel and sequential reads returned different pages")
    figures["speedup"] = round(figures["sequential_ms"] / figures["parallel_ms"], 1)
    return figures


def run(latency_ms: float = 20.0, partition_counts: tuple[int, ...] = (16, 64), repeats: int = 5) -> dict[str, Any]:
    """Wall time of one 100-reading page over k partitions, with ``latency_ms`` per Query call."""
    level = logger.log_level
    logger.setLevel("WARNING")  # the per-request log lines would drown the figures
    try:
        cases = [
            _measure(kind, partitions, latency_ms, repeats)
            for kind in ("random", "hybrid")
            for partitions in partition_counts
        ]
    finally:
        logger.setLevel(level)
    return {
        "benchmark": "query_fanout",
        "latency_ms_per_query": latency_ms,
        "page_size": PAGE,
        "repeats": repeats,
        "cases": cases,
        "command": ".venv/bin/python -m benchmarks.query_fanout",
    }


def to_result(figures: dict[str, Any]) -> Result:
    """The harness's figures from :func:`run`'s dict: per case, parallel and sequential page time and the ratio."""
    latency = figures["latency_ms_per_query"]
    result = Result(
        params={
            "latency_ms_per_query": latency,
            "page_size": figures["page_size"],
            "repeats": figures["repeats"],
            "partitions": sorted({case["partitions"] for case in figures["cases"]}),
        },
        method=(
            f"QueryService over an in-memory reader wrapped to sleep {latency:g} ms per Query call; one "
            f"{figures['page_size']}-reading page read with the configured concurrency (parallel) and with "
            "concurrency 1 (sequential), same data, same page asserted; median of the repeats after a warm-up"
        ),
    )
    for case in figures["cases"]:
        where = f"{case['shape']}, {case['partitions']} partitions"
        calls = f"{case['queries_per_page']} Query calls per page"
        result.add(f"{where}: parallel", case["parallel_ms"], "ms/page", f"{case['parallel_round_trips']} round trips")
        result.add(
            f"{where}: sequential", case["sequential_ms"], "ms/page", f"{case['sequential_round_trips']} round trips"
        )
        result.add(f"{where}: speed-up", case["speedup"], "x", calls)
    return result


@benchmark("query-fanout", "one page over k partitions with 20 ms per Query call: parallel vs sequential")
def query_fanout(quick: bool) -> Result:
    if quick:
        return to_result(run(partition_counts=(16,), repeats=2))
    return to_result(run())


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
