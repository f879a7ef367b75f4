"""Queries through the local HTTP API, each answer compared with what was published.

The expected answers are computed from the readings the demo published (its
ledger), by the API's documented rules, not by the query code:

* per-entity reads: every reading of the entity in ``[from, to)``, in sort-key
  order (time, then event id), each exactly once across the cursor's pages;
* ``latest``: the reading with the greatest (time, event id) at or before now;
* ``aggregates``: per epoch-aligned interval, count / min / max / avg / sum of
  every measure (sums and averages to a relative 1e-9: the API adds floats in
  time order, as this does, but numbers pass through DynamoDB's decimals);
* cross-entity ``/readings``: bucket by bucket, then entity, time and event id.

The comparison functions are pure; :class:`ApiClient` is a plain HTTP client
on loopback (local mode has no SigV4).
"""

from __future__ import annotations

import http.client
import json
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from keydesign import Bucket, format_ts, parse_timestamp

STATS = ("count", "min", "max", "avg", "sum")


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: Any
    latency_ms: float


class ApiClient:
    """GET requests to the local REST API (``http://127.0.0.1:<port>/<stage>``); JSON answers."""

    def __init__(self, base_url: str, *, timeout_s: float = 60.0) -> None:
        parts = urlsplit(base_url)
        if parts.hostname != "127.0.0.1" or parts.port is None:
            raise ValueError(f"the local API is on 127.0.0.1, not {base_url!r}")
        self.base_url = base_url
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout_s = timeout_s

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Response:
        query = f"?{urlencode(params)}" if params else ""
        connection = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)
        started = time.perf_counter()
        try:
            connection.request("GET", f"{self._prefix}{path}{query}")
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        latency = (time.perf_counter() - started) * 1000
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")[:500]
        return Response(response.status, body, latency)


# -- expected answers, from the ledger --------------------------------------------------------------


def api_reading(reading: Mapping[str, Any]) -> dict[str, Any]:
    """A published reading as the API returns it."""
    return {
        "entity_id": str(reading["entity_id"]),
        "event_id": str(reading["event_id"]),
        "timestamp": format_ts(_ms(reading["timestamp"])),
        "measures": dict(reading.get("measures") or {}),
        "dimensions": dict(reading.get("dimensions") or {}),
    }


def sort_key(reading: Mapping[str, Any]) -> str:
    """The reading's position in a partition: ``entity#time#event id``, the hybrid sort key."""
    return f"{reading['entity_id']}#{format_ts(_ms(reading['timestamp']))}#{reading['event_id']}"


def expected_entity_readings(
    ledger: Iterable[Mapping[str, Any]], entity: str, from_ms: int, to_ms: int
) -> list[dict[str, Any]]:
    chosen = [r for r in ledger if r["entity_id"] == entity and from_ms <= _ms(r["timestamp"]) < to_ms]
    return [api_reading(r) for r in sorted(chosen, key=sort_key)]


def expected_latest(ledger: Iterable[Mapping[str, Any]], entity: str, now_ms: int) -> dict[str, Any] | None:
    chosen = [r for r in ledger if r["entity_id"] == entity and _ms(r["timestamp"]) <= now_ms]
    return api_reading(max(chosen, key=sort_key)) if chosen else None


def expected_aggregates(
    ledger: Iterable[Mapping[str, Any]], entity: str | None, from_ms: int, to_ms: int, interval_ms: int
) -> list[dict[str, Any]]:
    """Per interval, the figures of ``entity``'s readings (None: every entity's)."""
    chosen = sorted(
        (r for r in ledger if entity in (None, r["entity_id"]) and from_ms <= _ms(r["timestamp"]) < to_ms),
        key=sort_key,
    )
    intervals: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for reading in chosen:
        ts = _ms(reading["timestamp"])
        intervals[ts - ts % interval_ms].append(reading)
    out = []
    for start, readings in sorted(intervals.items()):
        values: dict[str, list[float]] = defaultdict(list)
        for reading in readings:
            for name, value in (reading.get("measures") or {}).items():
                values[name].append(value)
        measures = {}
        for name, series in sorted(values.items()):
            total = 0.0
            for value in series:
                total += value
            measures[name] = {
                "count": len(series),
                "min": min(series),
                "max": max(series),
                "avg": total / len(series),
                "sum": total,
            }
        out.append({"start": format_ts(start), "readings": len(readings), "measures": measures})
    return out


def expected_range_page(
    ledger: Iterable[Mapping[str, Any]], from_ms: int, to_ms: int, bucket: Bucket, limit: int
) -> list[dict[str, Any]]:
    """The first ``limit`` readings of a cross-entity read: bucket by bucket, then entity, time, event id."""
    chosen = [r for r in ledger if from_ms <= _ms(r["timestamp"]) < to_ms]
    chosen.sort(key=lambda r: (bucket.start(_ms(r["timestamp"])), sort_key(r)))
    return [api_reading(r) for r in chosen[:limit]]


# -- comparisons ---------------------------------------------------------------------------------------


def compare_readings(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]]) -> str | None:
    """None when ``got`` is exactly ``want`` (same readings, same order); else what differs first."""
    ids = [r.get("event_id") for r in got]
    duplicates = len(ids) - len(set(ids))
    if duplicates:
        return f"{duplicates} reading(s) returned twice"
    if len(got) != len(want):
        missing = {r["event_id"] for r in want} - set(ids)
        extra = set(ids) - {r["event_id"] for r in want}
        return f"{len(got)} readings instead of {len(want)} ({len(missing)} missing, {len(extra)} unexpected)"
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        if _normal(a) != _normal(b):
            return f"reading {index} ({b['event_id']}) differs: got {dict(a)}, published {dict(b)}"
    return None


def compare_aggregates(
    got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]], *, rel_tol: float = 1e-9
) -> str | None:
    if len(got) != len(want):
        return f"{len(got)} intervals instead of {len(want)}"
    for a, b in zip(got, want, strict=True):
        if a.get("start") != b["start"] or a.get("readings") != b["readings"]:
            return (
                f"interval {b['start']}: got {a.get('start')} with {a.get('readings')} readings, want {b['readings']}"
            )
        got_measures = a.get("measures") or {}
        if set(got_measures) != set(b["measures"]):
            return f"interval {b['start']}: measures {sorted(got_measures)} instead of {sorted(b['measures'])}"
        for name, stats in b["measures"].items():
            for stat in STATS:
                have, expect = got_measures[name].get(stat), stats[stat]
                if have is None or not math.isclose(float(have), float(expect), rel_tol=rel_tol, abs_tol=1e-9):
                    return f"interval {b['start']} {name}.{stat}: got {have}, want {expect}"
    return None


def _normal(reading: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "entity_id": reading.get("entity_id"),
        "event_id": reading.get("event_id"),
        "timestamp": reading.get("timestamp"),
        "measures": {k: float(v) for k, v in (reading.get("measures") or {}).items()},
        "dimensions": dict(reading.get("dimensions") or {}),
    }


def _ms(value: Any) -> int:
    return value if isinstance(value, int) else parse_timestamp(str(value), "timestamp")


# -- the checks -----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Check:
    """One query (or a paged series of them) and its verdict."""

    name: str
    path: str
    latencies_ms: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    summary: str = ""
    difference: str | None = None

    def observe(self, response: Response) -> Any:
        self.latencies_ms.append(response.latency_ms)
        self.statuses.append(response.status)
        if response.status != 200:
            self.difference = f"HTTP {response.status}: {str(response.body)[:300]}"
            return None
        return response.body

    def as_dict(self) -> dict[str, Any]:
        lat = self.latencies_ms or [0.0]
        return {
            "name": self.name,
            "path": self.path,
            "equal": self.difference is None and bool(self.statuses),
            "difference": self.difference,
            "summary": self.summary,
            "requests": len(self.statuses),
            "latency_ms": {
                "p50": round(statistics.median(lat), 1),
                "max": round(max(lat), 1),
                "total": round(sum(lat), 1),
            },
        }


def entity_path(entity: str, route: str) -> str:
    return f"/entities/{quote(entity, safe='')}/{route}"


def check_entity_range(
    client: ApiClient, ledger: Sequence[Mapping[str, Any]], entity: str, from_ms: int, to_ms: int, *, limit: int = 1000
) -> Check:
    """Every page of an entity's range, following ``next_cursor`` to the end."""
    path = entity_path(entity, "readings")
    check = Check(f"{entity} readings, paged", path)
    want = expected_entity_readings(ledger, entity, from_ms, to_ms)
    got: list[Mapping[str, Any]] = []
    params: dict[str, str | int] = {"from": format_ts(from_ms), "to": format_ts(to_ms), "limit": limit}
    for _ in range(100_000):  # bounded: a page holds at least one reading
        body = check.observe(client.get(path, params))
        if body is None:
            return check
        got.extend(body["items"])
        if not body.get("next_cursor"):
            break
        params["cursor"] = body["next_cursor"]
    check.difference = compare_readings(got, want)
    check.summary = f"{len(got):,} readings in {len(check.statuses)} page(s) of up to {limit}, both phases"
    return check


def check_latest(client: ApiClient, ledger: Sequence[Mapping[str, Any]], entity: str) -> Check:
    path = entity_path(entity, "latest")
    check = Check(f"{entity} latest", path)
    response = client.get(path)
    want = expected_latest(ledger, entity, int(time.time() * 1000))
    body = check.observe(response)
    if body is None:
        return check
    reading = body.get("reading")
    if want is None or reading is None:
        check.difference = None if want == reading else f"got {reading}, published {want}"
    else:
        check.difference = compare_readings([reading], [want])
    check.summary = f"newest reading at {reading['timestamp'] if reading else None}"
    return check


def check_aggregates(
    client: ApiClient,
    ledger: Sequence[Mapping[str, Any]],
    entity: str,
    from_ms: int,
    to_ms: int,
    *,
    interval: str,
    interval_ms: int,
) -> Check:
    path = entity_path(entity, "aggregates")
    check = Check(f"{entity} aggregates per {interval}", path)
    body = check.observe(client.get(path, {"from": format_ts(from_ms), "to": format_ts(to_ms), "interval": interval}))
    if body is None:
        return check
    want = expected_aggregates(ledger, entity, from_ms, to_ms, interval_ms)
    check.difference = compare_aggregates(body.get("intervals", []), want)
    check.summary = f"{len(body.get('intervals', []))} interval(s) over {body.get('readings', 0):,} readings"
    return check


def check_rollups(
    client: ApiClient,
    ledger: Sequence[Mapping[str, Any]],
    entity: str | None,
    from_ms: int,
    to_ms: int,
    *,
    interval: str,
    interval_ms: int,
    raw_interval: str | None = None,
) -> Check:
    """An aggregate the rollups tile (``from``/``to`` on ``interval`` boundaries) must come from them
    and equal the ledger's figures; with ``raw_interval`` (not a multiple of a granularity) the same
    range is read raw too, to compare the costs. ``entity`` None: ``GET /aggregates`` (every entity)."""
    path = "/aggregates" if entity is None else entity_path(entity, "aggregates")
    check = Check(f"{entity or 'every entity'} aggregates per {interval}, from rollups", path)
    window = {"from": format_ts(from_ms), "to": format_ts(to_ms)}
    body = check.observe(client.get(path, {**window, "interval": interval}))
    if body is None:
        return check
    want = expected_aggregates(ledger, entity, from_ms, to_ms, interval_ms)
    got = body.get("intervals", [])
    if body.get("source") != "rollups":
        check.difference = f"source {body.get('source')!r}, not rollups (rollups through {body.get('rollups_through')})"
    else:
        check.difference = compare_aggregates(got, want)
    check.summary = f"{len(got)} interval(s) over {body.get('readings', 0):,} readings; rollups read {_cost(body)}"
    if raw_interval is not None and check.difference is None:
        raw = check.observe(client.get(path, {**window, "interval": raw_interval}))
        if raw is None:
            return check
        if raw.get("source") != "raw" or raw.get("readings") != body.get("readings"):
            check.difference = f"per {raw_interval}: source {raw.get('source')}, {raw.get('readings')} readings"
        check.summary += f"; raw (per {raw_interval}) read {_cost(raw)}"
    return check


def _cost(body: Mapping[str, Any]) -> str:
    cost = body.get("cost") or {}
    return (
        f"{cost.get('items_read', 0):,} items in {cost.get('queries', 0):,} Query call(s), "
        f"{float(cost.get('read_units', 0)):,.1f} RCU"
    )


def check_range_page(
    client: ApiClient,
    ledger: Sequence[Mapping[str, Any]],
    from_ms: int,
    to_ms: int,
    bucket: Bucket,
    *,
    limit: int = 1000,
) -> Check:
    path = "/readings"
    check = Check("cross-entity /readings, first page", path)
    body = check.observe(client.get(path, {"from": format_ts(from_ms), "to": format_ts(to_ms), "limit": limit}))
    if body is None:
        return check
    want = expected_range_page(ledger, from_ms, to_ms, bucket, limit)
    check.difference = compare_readings(body["items"], want)
    entities = len({r["entity_id"] for r in body["items"]})
    check.summary = f"{len(body['items']):,} readings of {entities:,} entities from {format_ts(from_ms)}"
    return check


def summarise(client: ApiClient, checks: Sequence[Check]) -> dict[str, Any]:
    results = [c.as_dict() for c in checks]
    return {
        "api_url": client.base_url,
        "signed": False,
        "all_equal": bool(results) and all(r["equal"] for r in results),
        "checks": results,
    }
