"""Queries through the local HTTP API (:class:`client.QueryClient`), each compared with what was published.

The expected answers come from the published readings (the ledger) by the API's documented rules, not by
the query code: an entity's readings in ``[from, to)`` in (time, event id) order, once across the cursor's
pages; ``latest``, the greatest (time, event id) at or before now; ``aggregates``, per epoch-aligned
interval, count / min / max / avg / sum of every measure (to a relative 1e-9: numbers pass through
DynamoDB's decimals); cross-entity ``/readings``, bucket by bucket, then entity, time and event id.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from client import ApiError, QueryClient
from keydesign import Bucket, format_ts, parse_duration

STATS = ("count", "min", "max", "avg", "sum")
Ledger = Sequence[Mapping[str, Any]]


def api_reading(reading: Mapping[str, Any]) -> dict[str, Any]:
    """A published reading as the API returns it."""
    return {
        "entity_id": str(reading["entity_id"]),
        "event_id": str(reading["event_id"]),
        "timestamp": format_ts(reading["timestamp"]),
        "measures": dict(reading.get("measures") or {}),
        "dimensions": dict(reading.get("dimensions") or {}),
    }


def expected_readings(
    ledger: Ledger, entity: str | None, from_ms: int, to_ms: int, bucket: Bucket | None = None
) -> list[dict[str, Any]]:
    """``entity``'s readings (None: every entity's) in ``[from_ms, to_ms)`` by entity, time and event id;
    with ``bucket``, bucket by bucket first, as a cross-entity read pages them."""
    chosen = [r for r in ledger if entity in (None, r["entity_id"]) and from_ms <= r["timestamp"] < to_ms]
    chosen.sort(key=lambda r: (r["entity_id"], r["timestamp"], r["event_id"]))
    if bucket is not None:
        chosen.sort(key=lambda r: bucket.start(r["timestamp"]))
    return [api_reading(r) for r in chosen]


def expected_aggregates(
    ledger: Ledger, entity: str | None, from_ms: int, to_ms: int, interval_ms: int
) -> list[dict[str, Any]]:
    """Per interval, the figures of ``entity``'s readings (None: every entity's)."""
    values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[int, int] = defaultdict(int)
    for reading in (r for r in ledger if entity in (None, r["entity_id"]) and from_ms <= r["timestamp"] < to_ms):
        start = reading["timestamp"] - reading["timestamp"] % interval_ms
        counts[start] += 1
        for name, value in (reading.get("measures") or {}).items():
            values[start][name].append(value)
    return [
        {
            "start": format_ts(start),
            "readings": counts[start],
            "measures": {
                n: dict(zip(STATS, (len(v), min(v), max(v), math.fsum(v) / len(v), math.fsum(v)), strict=True))
                for n, v in sorted(values[start].items())
            },
        }
        for start in sorted(counts)
    ]


def compare_readings(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]]) -> str | None:
    """None when ``got`` is exactly ``want`` (same readings, same order); else what differs first."""
    ids, wanted = [r.get("event_id") for r in got], {r["event_id"] for r in want}
    if len(ids) != len(set(ids)):
        return f"{len(ids) - len(set(ids))} reading(s) returned twice"
    if len(got) != len(want):
        missing, extra = len(wanted - set(ids)), len(set(ids) - wanted)
        return f"{len(got)} readings instead of {len(want)} ({missing} missing, {extra} unexpected)"

    def normal(r: Mapping[str, Any]) -> tuple[Any, ...]:  # an int in JSON is the float published
        measures = {k: float(v) for k, v in (r.get("measures") or {}).items()}
        return r.get("entity_id"), r.get("event_id"), r.get("timestamp"), measures, dict(r.get("dimensions") or {})

    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        if normal(a) != normal(b):
            return f"reading {index} ({b['event_id']}) differs: got {dict(a)}, published {dict(b)}"
    return None


def compare_aggregates(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]]) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} intervals instead of {len(want)}"
    for a, b in zip(got, want, strict=True):
        if (a.get("start"), a.get("readings")) != (b["start"], b["readings"]):
            return f"interval {b['start']}: got {a.get('start')}, {a.get('readings')} readings; want {b['readings']}"
        measures = a.get("measures") or {}
        if set(measures) != set(b["measures"]):
            return f"interval {b['start']}: measures {sorted(measures)} instead of {sorted(b['measures'])}"
        for name, stats in b["measures"].items():
            for stat, expected in stats.items():
                have = measures[name].get(stat)
                if have is None or not math.isclose(float(have), float(expected), rel_tol=1e-9, abs_tol=1e-9):
                    return f"interval {b['start']} {name}.{stat}: got {have}, want {expected}"
    return None


@dataclass(slots=True)
class Check:
    """One query (or a paged series of them) and its verdict."""

    name: str
    path: str
    latencies_ms: list[float] = field(default_factory=list)
    summary: str = ""
    difference: str | None = None

    def get(self, client: QueryClient, params: Mapping[str, str | int]) -> Any:
        """The body of a 2xx; else None, and the check fails naming the API's error."""
        started = time.perf_counter()
        try:
            return client.get(self.path, {k: str(v) for k, v in params.items()})
        except ApiError as exc:
            self.difference = str(exc)[:300]
            return None
        finally:
            self.latencies_ms.append((time.perf_counter() - started) * 1000)

    def as_dict(self) -> dict[str, Any]:
        lat = self.latencies_ms or [0.0]
        return {
            "name": self.name,
            "path": self.path,
            "equal": self.difference is None and bool(self.latencies_ms),
            "difference": self.difference,
            "summary": self.summary,
            "requests": len(self.latencies_ms),
            "latency_ms": {
                "p50": round(statistics.median(lat), 1),
                "max": round(max(lat), 1),
                "total": round(sum(lat), 1),
            },
        }


def _entity(entity: str, route: str) -> str:
    return f"/entities/{quote(entity, safe='')}/{route}"


def _window(from_ms: int, to_ms: int, **more: str | int) -> dict[str, str | int]:
    return {"from": format_ts(from_ms), "to": format_ts(to_ms), **more}


def check_readings(
    client: QueryClient,
    ledger: Ledger,
    entity: str | None,
    from_ms: int,
    to_ms: int,
    *,
    bucket: Bucket,
    limit: int = 1000,
) -> Check:
    """An entity's range page by page, following ``next_cursor`` to the end; ``entity`` None: the first
    page of a cross-entity read."""
    if entity is None:
        check = Check("cross-entity /readings, first page", "/readings")
        want = expected_readings(ledger, None, from_ms, to_ms, bucket)[:limit]
    else:
        check = Check(f"{entity} readings, paged", _entity(entity, "readings"))
        want = expected_readings(ledger, entity, from_ms, to_ms)
    got: list[Mapping[str, Any]] = []
    params = _window(from_ms, to_ms, limit=limit)
    for _ in range(100_000):  # bounded: a page holds at least one reading
        if (body := check.get(client, params)) is None:
            return check
        got.extend(body["items"])
        if entity is None or not body.get("next_cursor"):
            break
        params["cursor"] = body["next_cursor"]
    check.difference = compare_readings(got, want)
    pages, entities = len(check.latencies_ms), len({r["entity_id"] for r in got})
    check.summary = f"{len(got):,} readings of {entities:,} entities in {pages} page(s) of up to {limit}"
    return check


def check_each_entity(
    client: QueryClient, ledger: Ledger, entities: Sequence[str], from_ms: int, to_ms: int, *, bucket: Bucket, name: str
) -> Check:
    """Each entity's range read page by page (:func:`check_readings`), as one check: the first that differs
    names its entity."""
    check = Check(f"{name}: each entity's readings", _entity("{entity_id}", "readings"))
    for entity in entities:
        one = check_readings(client, ledger, entity, from_ms, to_ms, bucket=bucket)
        check.latencies_ms += one.latencies_ms
        if one.difference is not None and check.difference is None:
            check.difference = f"{entity}: {one.difference}"
    readings = len(expected_readings(ledger, None, from_ms, to_ms))
    check.summary = f"{readings:,} readings of {len(entities):,} entities in {len(check.latencies_ms):,} request(s)"
    return check


def check_latest(client: QueryClient, ledger: Ledger, entity: str) -> Check:
    check = Check(f"{entity} latest", _entity(entity, "latest"))
    if (body := check.get(client, {})) is not None:
        reading, want = body.get("reading"), expected_readings(ledger, entity, 0, int(time.time() * 1000) + 1)[-1:]
        check.difference = compare_readings([reading] if reading else [], want)
        check.summary = f"newest reading at {reading['timestamp'] if reading else None}"
    return check


def check_aggregates(
    client: QueryClient,
    ledger: Ledger,
    entity: str | None,
    from_ms: int,
    to_ms: int,
    *,
    interval: str,
    rollups: bool = False,
    raw_interval: str | None = None,
) -> Check:
    """An aggregate per ``interval`` equal to the ledger's figures. With ``rollups`` (``from``/``to`` on
    ``interval`` boundaries) it must come from them, and with ``raw_interval`` (not a multiple of a
    granularity) the same range is read raw too, to compare the costs. ``entity`` None: every entity's."""
    path = "/aggregates" if entity is None else _entity(entity, "aggregates")
    check = Check(f"{entity or 'every entity'} aggregates per {interval}" + (", from rollups" if rollups else ""), path)
    if (body := check.get(client, _window(from_ms, to_ms, interval=interval))) is None:
        return check
    want = expected_aggregates(ledger, entity, from_ms, to_ms, parse_duration(interval, "interval"))
    check.difference = compare_aggregates(body.get("intervals", []), want)
    if rollups and body.get("source") != "rollups":
        check.difference = f"source {body.get('source')!r}, not rollups (through {body.get('rollups_through')})"
    check.summary = f"{len(body.get('intervals', []))} interval(s) over {body.get('readings', 0):,} readings"
    check.summary += f"; rollups read {_cost(body)}" if rollups else ""
    if raw_interval is not None and check.difference is None:
        raw = check.get(client, _window(from_ms, to_ms, interval=raw_interval)) or {}
        if raw.get("source") != "raw" or raw.get("readings") != body.get("readings"):
            check.difference = f"per {raw_interval}: source {raw.get('source')}, {raw.get('readings')} readings"
        check.summary += f"; raw (per {raw_interval}) read {_cost(raw)}"
    return check


def _cost(body: Mapping[str, Any]) -> str:
    cost = body.get("cost") or {}
    items, queries, units = cost.get("items_read", 0), cost.get("queries", 0), float(cost.get("read_units", 0))
    return f"{items:,} items in {queries:,} Query call(s), {units:,.1f} RCU"
