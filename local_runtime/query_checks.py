"""Queries through the local HTTP API, each answer compared with what was published.

The expected answers come from the readings the demo published (its ledger), by the API's documented
rules, not by the query code: an entity's readings in ``[from, to)`` in (time, event id) order, each
once across the cursor's pages; ``latest``, the greatest (time, event id) at or before now;
``aggregates``, per epoch-aligned interval, count / min / max / avg / sum of every measure (to a
relative 1e-9: numbers pass through DynamoDB's decimals); cross-entity ``/readings``, bucket by bucket,
then entity, time and event id.
"""

from __future__ import annotations

import json
import math
import statistics
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from keydesign import Bucket, format_ts
from local_runtime.environment import assert_loopback

STATS = ("count", "min", "max", "avg", "sum")
Ledger = Sequence[Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: Any
    latency_ms: float


class ApiClient:
    """GET requests to the local REST API (``http://127.0.0.1:<port>/<stage>``: no SigV4 locally)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = assert_loopback(base_url).rstrip("/")

    def get(self, path: str, params: Mapping[str, str | int] | None = None) -> Response:
        """The answer, its JSON body parsed (or its first 500 characters when it is not JSON)."""
        started = time.perf_counter()
        try:
            url = f"{self.base_url}{path}" + (f"?{urlencode(params)}" if params else "")
            with urllib.request.urlopen(url, timeout=60) as answer:  # noqa: S310 - a loopback URL, checked
                status, raw = answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")[:500]
        return Response(status, body, (time.perf_counter() - started) * 1000)


# -- expected answers, from the ledger --------------------------------------------------------------


def api_reading(reading: Mapping[str, Any]) -> dict[str, Any]:
    """A published reading as the API returns it."""
    fields = {"entity_id": str(reading["entity_id"]), "event_id": str(reading["event_id"])}
    extras = {"measures": dict(reading.get("measures") or {}), "dimensions": dict(reading.get("dimensions") or {})}
    return {**fields, "timestamp": format_ts(reading["timestamp"]), **extras}


def _chosen(ledger: Ledger, entity: str | None, from_ms: int, to_ms: int) -> list[Mapping[str, Any]]:
    """``entity``'s readings (None: every entity's) in ``[from_ms, to_ms)``, by entity, time, event id."""
    wanted = [r for r in ledger if entity in (None, r["entity_id"]) and from_ms <= r["timestamp"] < to_ms]
    return sorted(wanted, key=lambda r: (r["entity_id"], r["timestamp"], r["event_id"]))


def expected_entity_readings(ledger: Ledger, entity: str, from_ms: int, to_ms: int) -> list[dict[str, Any]]:
    return [api_reading(r) for r in _chosen(ledger, entity, from_ms, to_ms)]


def expected_latest(ledger: Ledger, entity: str, now_ms: int) -> dict[str, Any] | None:
    chosen = _chosen(ledger, entity, 0, now_ms + 1)
    return api_reading(chosen[-1]) if chosen else None


def expected_range_page(ledger: Ledger, from_ms: int, to_ms: int, bucket: Bucket, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` readings of a cross-entity read: bucket by bucket, then entity, time, event id."""
    chosen = _chosen(ledger, None, from_ms, to_ms)
    return [api_reading(r) for r in sorted(chosen, key=lambda r: bucket.start(r["timestamp"]))[:limit]]


def expected_aggregates(
    ledger: Ledger, entity: str | None, from_ms: int, to_ms: int, interval_ms: int
) -> list[dict[str, Any]]:
    """Per interval, the figures of ``entity``'s readings (None: every entity's)."""
    values: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[int, int] = defaultdict(int)
    for reading in _chosen(ledger, entity, from_ms, to_ms):
        start = reading["timestamp"] - reading["timestamp"] % interval_ms
        counts[start] += 1
        for name, value in (reading.get("measures") or {}).items():
            values[start][name].append(value)
    out = []
    for start in sorted(counts):
        measures = sorted(values[start].items())
        figures = {n: (len(v), min(v), max(v), math.fsum(v) / len(v), math.fsum(v)) for n, v in measures}
        stats = {name: dict(zip(STATS, f, strict=True)) for name, f in figures.items()}
        out.append({"start": format_ts(start), "readings": counts[start], "measures": stats})
    return out


# -- comparisons ---------------------------------------------------------------------------------------


def compare_readings(got: Sequence[Mapping[str, Any]], want: Sequence[Mapping[str, Any]]) -> str | None:
    """None when ``got`` is exactly ``want`` (same readings, same order); else what differs first."""
    ids, wanted = [r.get("event_id") for r in got], {r["event_id"] for r in want}
    if len(ids) != len(set(ids)):
        return f"{len(ids) - len(set(ids))} reading(s) returned twice"
    if len(got) != len(want):
        missing, extra = len(wanted - set(ids)), len(set(ids) - wanted)
        return f"{len(got)} readings instead of {len(want)} ({missing} missing, {extra} unexpected)"
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        if _normal(a) != _normal(b):
            return f"reading {index} ({b['event_id']}) differs: got {dict(a)}, published {dict(b)}"
    return None


def _normal(reading: Mapping[str, Any]) -> tuple[Any, ...]:
    measures = {k: float(v) for k, v in (reading.get("measures") or {}).items()}
    names = (reading.get("entity_id"), reading.get("event_id"), reading.get("timestamp"))
    return (*names, measures, dict(reading.get("dimensions") or {}))


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
        """The body of a 200; else None, and the check fails naming the status."""
        self.latencies_ms.append(response.latency_ms)
        self.statuses.append(response.status)
        if response.status != 200:
            self.difference = f"HTTP {response.status}: {str(response.body)[:300]}"
            return None
        return response.body

    def as_dict(self) -> dict[str, Any]:
        lat = self.latencies_ms or [0.0]
        latency = {"p50": round(statistics.median(lat), 1), "max": round(max(lat), 1), "total": round(sum(lat), 1)}
        equal = self.difference is None and bool(self.statuses)
        return {
            "name": self.name,
            "path": self.path,
            "equal": equal,
            "difference": self.difference,
            "summary": self.summary,
            "requests": len(self.statuses),
            "latency_ms": latency,
        }


def _entity(entity: str, route: str) -> str:
    return f"/entities/{quote(entity, safe='')}/{route}"


def _window(from_ms: int, to_ms: int, **more: str | int) -> dict[str, str | int]:
    return {"from": format_ts(from_ms), "to": format_ts(to_ms), **more}


def check_readings(
    client: ApiClient,
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
        want = expected_range_page(ledger, from_ms, to_ms, bucket, limit)
    else:
        check = Check(f"{entity} readings, paged", _entity(entity, "readings"))
        want = expected_entity_readings(ledger, entity, from_ms, to_ms)
    got: list[Mapping[str, Any]] = []
    params = _window(from_ms, to_ms, limit=limit)
    for _ in range(100_000):  # bounded: a page holds at least one reading
        body = check.observe(client.get(check.path, params))
        if body is None:
            return check
        got.extend(body["items"])
        if entity is None or not body.get("next_cursor"):
            break
        params["cursor"] = body["next_cursor"]
    check.difference = compare_readings(got, want)
    entities = len({r["entity_id"] for r in got})
    check.summary = f"{len(got):,} readings of {entities:,} entities in {len(check.statuses)} page(s) of up to {limit}"
    return check


def check_latest(client: ApiClient, ledger: Ledger, entity: str) -> Check:
    check = Check(f"{entity} latest", _entity(entity, "latest"))
    body = check.observe(client.get(check.path))
    if body is not None:
        reading, want = body.get("reading"), expected_latest(ledger, entity, int(time.time() * 1000))
        check.difference = compare_readings([reading] if reading else [], [want] if want else [])
        check.summary = f"newest reading at {reading['timestamp'] if reading else None}"
    return check


def check_aggregates(
    client: ApiClient,
    ledger: Ledger,
    entity: str | None,
    from_ms: int,
    to_ms: int,
    *,
    interval: str,
    interval_ms: int,
    rollups: bool = False,
    raw_interval: str | None = None,
) -> Check:
    """An aggregate per ``interval`` equal to the ledger's figures. With ``rollups`` (``from``/``to`` on
    ``interval`` boundaries) it must come from them, and with ``raw_interval`` (not a multiple of a
    granularity) the same range is read raw too, to compare the costs. ``entity`` None: every entity's."""
    path = "/aggregates" if entity is None else _entity(entity, "aggregates")
    check = Check(f"{entity or 'every entity'} aggregates per {interval}" + (", from rollups" if rollups else ""), path)
    body = check.observe(client.get(path, _window(from_ms, to_ms, interval=interval)))
    if body is None:
        return check
    want = expected_aggregates(ledger, entity, from_ms, to_ms, interval_ms)
    check.difference = compare_aggregates(body.get("intervals", []), want)
    if rollups and body.get("source") != "rollups":
        check.difference = f"source {body.get('source')!r}, not rollups (through {body.get('rollups_through')})"
    check.summary = f"{len(body.get('intervals', []))} interval(s) over {body.get('readings', 0):,} readings"
    check.summary += f"; rollups read {_cost(body)}" if rollups else ""
    if raw_interval is not None and check.difference is None:
        raw = check.observe(client.get(path, _window(from_ms, to_ms, interval=raw_interval))) or {}
        if raw.get("source") != "raw" or raw.get("readings") != body.get("readings"):
            check.difference = f"per {raw_interval}: source {raw.get('source')}, {raw.get('readings')} readings"
        check.summary += f"; raw (per {raw_interval}) read {_cost(raw)}"
    return check


def _cost(body: Mapping[str, Any]) -> str:
    cost = body.get("cost") or {}
    items, queries, units = cost.get("items_read", 0), cost.get("queries", 0), float(cost.get("read_units", 0))
    return f"{items:,} items in {queries:,} Query call(s), {units:,.1f} RCU"


def summarise(client: ApiClient, checks: Iterable[Check]) -> dict[str, Any]:
    results = [c.as_dict() for c in checks]
    equal = bool(results) and all(r["equal"] for r in results)
    return {"api_url": client.base_url, "signed": False, "all_equal": equal, "checks": results}
