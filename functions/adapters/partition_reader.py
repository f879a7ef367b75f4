"""Reading one partition of the readings table: the query Lambda's data access.

One call reads one page (at most 1 MB, or ``limit`` evaluated items) of one
:class:`keydesign.PartitionQuery`; the caller follows ``next_key`` (DynamoDB's
``LastEvaluatedKey``) for the next page. Everything the request carries goes
into ``ExpressionAttributeNames`` / ``ExpressionAttributeValues``: no value and
no attribute name is ever pasted into an expression string.

Filters applied on the server:

* expired items (``ttl`` below now, epoch seconds) are hidden, because
  DynamoDB deletes them up to a couple of days late;
* ``PartitionQuery.time_filter`` limits a whole-partition read to the
  partition's time range, on the fixed-width ``t`` attribute.

A table that does not exist (a per-period table already dropped by retention,
or not created yet) reads as an empty partition; ``Page.table_missing`` says so,
so the caller can log it.

The :class:`PartitionReader` protocol is the seam: tests and benchmarks swap in
a fake, and a fault injector can wrap :class:`DynamoPartitionReader`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from adapters.clients import client
from keydesign import PartitionQuery, format_ts


@dataclass(frozen=True, slots=True)
class StoredReading:
    """One item as read back: the key it is stored under and the reading."""

    sk: str
    entity_id: str
    ts: str
    event_id: str
    measures: Mapping[str, int | float]
    dimensions: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One Query call.

    ``sk_low`` / ``sk_high`` (inclusive) narrow the partition's own sort-key
    range, for a read that resumes inside it; ``measures`` projects the named
    measures only (None: every measure); ``now_epoch_s`` turns on the TTL filter.
    """

    partition: PartitionQuery
    descending: bool = False
    consistent: bool = False
    limit: int | None = None
    sk_low: str | None = None
    sk_high: str | None = None
    measures: tuple[str, ...] | None = None
    with_dimensions: bool = True
    now_epoch_s: int | None = None
    start_key: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """What one Query call returned."""

    items: tuple[StoredReading, ...]
    next_key: Mapping[str, Any] | None
    scanned: int
    read_units: float
    table_missing: bool = False


EMPTY_PAGE = Page((), None, 0, 0.0)


class PartitionReader(Protocol):
    def read_page(self, request: PageRequest) -> Page: ...


def effective_bounds(request: PageRequest) -> tuple[str | None, str | None]:
    """The inclusive sort-key range of ``request``: the partition's range narrowed
    by the request's own bounds (the tighter of each pair)."""
    low, high = request.partition.sk_low, request.partition.sk_high
    if request.sk_low is not None and (low is None or request.sk_low > low):
        low = request.sk_low
    if request.sk_high is not None and (high is None or request.sk_high < high):
        high = request.sk_high
    return low, high


@dataclass(slots=True)
class _Expression:
    """Collects placeholders so every name and value is bound, never inlined."""

    names: dict[str, str]
    values: dict[str, dict[str, str]]

    def name(self, placeholder: str, attribute: str) -> str:
        self.names[placeholder] = attribute
        return placeholder

    def string(self, placeholder: str, value: str) -> str:
        self.values[placeholder] = {"S": value}
        return placeholder

    def number(self, placeholder: str, value: int) -> str:
        self.values[placeholder] = {"N": str(value)}
        return placeholder


def build_query(request: PageRequest) -> dict[str, Any] | None:
    """The keyword arguments of the DynamoDB ``Query`` call for ``request``, or
    None when the narrowed sort-key range is empty (nothing to ask for)."""
    low, high = effective_bounds(request)
    if low is not None and high is not None and low > high:
        return None
    part = request.partition
    expr = _Expression({}, {})
    key = f"{expr.name('#pk', 'pk')} = {expr.string(':pk', part.pk)}"
    sk = expr.name("#sk", "sk")
    if low is not None and high is not None:
        key += f" AND {sk} BETWEEN {expr.string(':sk_low', low)} AND {expr.string(':sk_high', high)}"
    elif low is not None:
        key += f" AND {sk} >= {expr.string(':sk_low', low)}"
    elif high is not None:
        key += f" AND {sk} <= {expr.string(':sk_high', high)}"

    filters: list[str] = []
    if part.time_filter:
        t = expr.name("#t", "t")
        t_from = expr.string(":t_from", format_ts(part.from_ms))
        t_to = expr.string(":t_to", format_ts(part.to_ms - 1))
        filters.append(f"{t} BETWEEN {t_from} AND {t_to}")
    if request.now_epoch_s is not None:
        ttl = expr.name("#ttl", "ttl")
        # DynamoDB's own rule: an item is expired once its ttl is below now.
        filters.append(f"(attribute_not_exists({ttl}) OR {ttl} >= {expr.number(':now', request.now_epoch_s)})")

    projection = [sk, expr.name("#e", "e"), expr.name("#t", "t"), expr.name("#i", "i")]
    m = expr.name("#m", "m")
    if request.measures is None:
        projection.append(m)
    else:
        projection.extend(f"{m}.{expr.name(f'#m{n}', name)}" for n, name in enumerate(request.measures))
    if request.with_dimensions:
        projection.append(expr.name("#d", "d"))

    kwargs: dict[str, Any] = {
        "TableName": part.table,
        "KeyConditionExpression": key,
        "ProjectionExpression": ", ".join(projection),
        "ExpressionAttributeNames": expr.names,
        "ExpressionAttributeValues": expr.values,
        "ScanIndexForward": not request.descending,
        "ConsistentRead": request.consistent,
        "ReturnConsumedCapacity": "TOTAL",
    }
    if filters:
        kwargs["FilterExpression"] = " AND ".join(filters)
    if request.limit is not None:
        kwargs["Limit"] = request.limit
    if request.start_key is not None:
        kwargs["ExclusiveStartKey"] = dict(request.start_key)
    return kwargs


class DynamoPartitionReader:
    """:class:`PartitionReader` on the DynamoDB low-level client (thread-safe)."""

    def __init__(self, dynamodb: Any | None = None, *, pool: int = 32) -> None:
        self._dynamodb = dynamodb
        self._pool = pool

    def read_page(self, request: PageRequest) -> Page:
        kwargs = build_query(request)
        if kwargs is None:
            return EMPTY_PAGE
        dynamodb = self._dynamodb if self._dynamodb is not None else client("dynamodb", pool=self._pool)
        try:
            response = dynamodb.query(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return Page((), None, 0, 0.0, table_missing=True)
            raise
        items = tuple(r for r in (_reading(raw) for raw in response.get("Items", ())) if r is not None)
        consumed = response.get("ConsumedCapacity") or {}
        return Page(
            items=items,
            next_key=response.get("LastEvaluatedKey"),
            scanned=int(response.get("ScannedCount", len(items))),
            read_units=float(consumed.get("CapacityUnits", 0.0)),
        )


def _reading(raw: Mapping[str, Any]) -> StoredReading | None:
    sk = raw.get("sk", {}).get("S")
    ts = raw.get("t", {}).get("S")
    if not sk or not ts:
        return None  # not a reading (a foreign item); nothing sensible to return
    measures = {name: _number(value["N"]) for name, value in raw.get("m", {}).get("M", {}).items() if "N" in value}
    dimensions = {name: value["S"] for name, value in raw.get("d", {}).get("M", {}).items() if "S" in value}
    return StoredReading(
        sk=sk,
        entity_id=raw.get("e", {}).get("S", ""),
        ts=ts,
        event_id=raw.get("i", {}).get("S", ""),
        measures=measures,
        dimensions=dimensions,
    )


def _number(text: str) -> int | float:
    """A DynamoDB number as JSON would carry it: int when whole and written so, else float."""
    try:
        return int(text)
    except ValueError:
        return float(text)
