"""Packing the worst mixes of names: time and memory per reading of :meth:`keydesign.Layout.pack`.

A block stores its readings by column, one column a measure or dimension name. Before format 3 every
column was padded with nulls to the block's length, so readings that each carry names no other reading
has cost readings x names: 100 such readings of 100 measures took 0.78 s and 20 MB to pack, 400 took
12.1 s and 294 MB (issue 36). Now a name fewer than half the readings have is a sparse column, and a run
is cut by an estimate of its body before it is encoded, so packing is linear in the readings' size.

The mixes, ``n`` readings of one entity within one second (so one run, which only their size cuts):

* ``unique measures``: each reading has 100 measure names no other reading has (the issue's case);
* ``unique dimensions``: one measure and 50 dimension names no other reading has, values of 256 characters;
* ``largest readings``: the most a reading may hold, every name its own: 100 measures and 50 dimensions,
  names of 64 characters, values of 256;
* ``half the names each``: 100 measure names, each in exactly half the readings (alternating): the most
  nulls a dense column holds before it is written sparse;
* ``usual sensor``: three measures every reading has (the dense case blocks are made for), for scale.

Each mix is packed at two sizes; CPU time (process time, best of ``ROUNDS``) and peak memory
(``tracemalloc``, a run of its own) are reported per reading and per KB of the readings' JSON. Linear
packing shows as the same cost per reading at both sizes.

Run: ``python -m benchmarks pack-names`` (harness). The same file runs against another tree's code
(for a before/after), since it calls only ``Layout.pack``:
``PYTHONPATH=<tree>/functions:. python -m benchmarks pack-names``.
"""

from __future__ import annotations

import json
import time
import tracemalloc
from collections.abc import Callable

from benchmarks.harness import Result, benchmark
from keydesign import Layout, Reading, ShardMap, parse_timestamp

T0 = parse_timestamp("2026-11-22T06:10:00Z")
ROUNDS = 3
SIZES = (250, 1_000)
QUICK_SIZES = (100, 200)


def _reading(i: int, measures: dict[str, float], dimensions: dict[str, str] | None = None) -> Reading:
    raw: dict[str, object] = {"entity_id": "worst-1", "timestamp": T0 + i, "event_id": f"e{i:05}", "measures": measures}
    if dimensions:
        raw["dimensions"] = dimensions
    return Reading.parse(raw)


def unique_measures(n: int) -> list[Reading]:
    return [_reading(i, {f"m{i}_{k}": i * 1_000 + k + 0.5 for k in range(100)}) for i in range(n)]


def unique_dimensions(n: int) -> list[Reading]:
    return [
        _reading(i, {"v": float(i)}, {f"d{i}_{k}": f"{i}-{k}-".ljust(256, "x") for k in range(50)}) for i in range(n)
    ]


def largest_readings(n: int) -> list[Reading]:
    def name(prefix: str, i: int, k: int) -> str:
        return f"{prefix}{i}_{k}_".ljust(64, "n")

    return [
        _reading(
            i,
            {name("m", i, k): i * 1_000 + k + 0.5 for k in range(100)},
            {name("d", i, k): f"{i}-{k}-".ljust(256, "x") for k in range(50)},
        )
        for i in range(n)
    ]


def half_the_names(n: int) -> list[Reading]:
    return [_reading(i, {f"m{k}": i * 1_000 + k + 0.5 for k in range(i % 2, 200, 2)}) for i in range(n)]


def usual_sensor(n: int) -> list[Reading]:
    return [
        _reading(i, {"temperature": 20 + i % 50 / 10, "humidity": 40 + i % 7, "pressure": 1013.25}) for i in range(n)
    ]


MIXES: dict[str, Callable[[int], list[Reading]]] = {
    "unique measures": unique_measures,
    "unique dimensions": unique_dimensions,
    "largest readings": largest_readings,
    "half the names each": half_the_names,
    "usual sensor": usual_sensor,
}


def measure(readings: list[Reading], rounds: int = ROUNDS) -> dict[str, float]:
    """CPU seconds (best of ``rounds``), peak traced bytes, blocks and JSON bytes of packing ``readings``."""
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 100)
    entries = [(r, 1) for r in readings]
    best = float("inf")
    blocks = 0
    for _ in range(rounds):
        started = time.process_time()
        blocks = len(layout.pack(entries, shard_map))
        best = min(best, time.process_time() - started)
    tracemalloc.start()
    try:
        layout.pack(entries, shard_map)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    json_bytes = sum(len(json.dumps(r.to_json(), separators=(",", ":"))) for r in readings)
    return {"cpu_s": best, "peak_bytes": peak, "blocks": blocks, "json_bytes": json_bytes}


@benchmark("pack-names", "Layout.pack of the worst mixes of names: CPU and peak memory per reading, at two sizes")
def pack_names(quick: bool) -> Result:
    sizes = QUICK_SIZES if quick else SIZES
    result = Result(
        params={"sizes": list(sizes), "rounds": ROUNDS, "mixes": list(MIXES)},
        method=(
            "n readings of one entity within 1 s, packed by Layout.pack (hybrid, 1 h buckets); CPU = process "
            f"time, best of {ROUNDS}; peak memory = tracemalloc's peak over one more pack (the readings themselves "
            "excluded: they are built before it starts); per KB = per 1,000 bytes of the readings' compact JSON"
        ),
    )
    for name, make in MIXES.items():
        for n in sizes:
            got = measure(make(n))
            per_kb = 1_000 / got["json_bytes"]
            label = f"{name}, {n:,} readings"
            result.add(f"{label}: CPU a reading", round(got["cpu_s"] / n * 1e6, 1), "us")
            result.add(f"{label}: CPU a KB of readings", round(got["cpu_s"] * per_kb * 1e6, 1), "us")
            result.add(f"{label}: peak memory a reading", round(got["peak_bytes"] / n / 1_000, 2), "KB")
            result.add(f"{label}: blocks", got["blocks"], "blocks", f"{got['json_bytes'] / n:,.0f} B of JSON a reading")
    return result
