"""moto-backed DynamoDB for the query API: tables for a layout, readings written
as blocks through the key-design layer (``Layout.pack``, not the ingest Lambda),
and the API built on top with a fixed clock."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from functools import partial
from typing import Any

import boto3
import pytest
from boto3.dynamodb.types import TypeSerializer

from adapters.partition_reader import DynamoPartitionReader
from adapters.shard_map_source import StaticShardMap
from keydesign import Layout, Reading, ShardMap, format_ts, parse_timestamp
from query.api import create_app
from query.cursor import CursorCodec
from query.logic import QueryService
from query.settings import QueryLimits
from tests.integration.mocked_aws import create_readings_table, mocked_aws
from tests.unit.query.apigw import ApiClient

REGION = "eu-west-1"
PREFIX = "readings"
KEY = b"integration-cursor-key-0123456789abcdef"
#: The clock of every API built here: readings are written relative to it.
NOW = parse_timestamp("2026-11-22T12:00:00Z")
HOUR = 3_600_000
LAYOUT_KINDS = ("random", "calculated", "hybrid")

pytestmark = pytest.mark.integration

_serializer = TypeSerializer()


def to_dynamodb(item: dict[str, object]) -> dict[str, Any]:
    def plain(value: object) -> object:
        if isinstance(value, float):
            return Decimal(repr(value))
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    return {name: _serializer.serialize(plain(value)) for name, value in item.items()}


@dataclass
class Written:
    """A reading as stored, with its block's expiry and its position key, for brute-force expectations."""

    reading: Reading
    ttl: int | None
    key: str

    @property
    def expired(self) -> bool:
        return self.ttl is not None and self.ttl < NOW // 1000


@dataclass
class Store:
    dynamodb: Any
    layout: Layout
    shard_map: ShardMap
    written: list[Written] = field(default_factory=list)
    tables: set[str] = field(default_factory=set)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    version: int = 0

    def create_tables(self, from_ms: int, to_ms: int) -> None:
        """Every table the layout uses for instants in ``[from_ms, to_ms)``."""
        period = self.layout.table_period
        starts = [from_ms] if period is None else list(period.starts(from_ms, to_ms))
        for start in starts:
            name = self.layout.table_for(start)
            if name in self.tables:
                continue
            create_readings_table(self.dynamodb, name)
            self.tables.add(name)

    def write(self, reading: Reading, *, ttl: int | None = None, copies: int = 1) -> Written:
        """Store ``reading`` alone in a batch (see :meth:`write_batch`)."""
        return self.write_batch([reading], ttl=ttl, copies=copies)[0]

    def write_series(self, entity: str, count: int, every_ms: int) -> None:
        """``count`` readings of ``entity`` from three hours before NOW, ``every_ms`` apart, each alone in
        a batch (event ids e00, e01, ...)."""
        for n in range(count):
            self.write(reading(entity, NOW - 3 * HOUR + n * every_ms, f"e{n:02d}"))

    def write_batch(self, readings: list[Reading], *, ttl: int | None = None, copies: int = 1) -> list[Written]:
        """Store ``readings`` as one ingest batch does: the blocks ``Layout.pack`` makes, of the next
        version, with ``ttl`` (None: none). ``copies`` > 1 stores a single-block batch again under
        other partitions (random layout only), as a redelivered batch would."""
        self.version += 1
        pks: set[str] = set()
        attempts = 0
        while len(pks) < copies:
            attempts += 1
            assert attempts < 1000, "could not place the copies in distinct partitions"
            blocks = self.layout.pack([(r, self.version) for r in readings], self.shard_map, rng=self.rng)
            if copies > 1 and (len(blocks) > 1 or blocks[0].key.pk in pks):
                assert len(blocks) == 1, "copies in distinct partitions are placed for batches of one block"
                continue
            pks.update(block.key.pk for block in blocks)
            for block in blocks:
                item = block.item() | ({"ttl": ttl} if ttl is not None else {})
                self.dynamodb.put_item(TableName=block.key.table, Item=to_dynamodb(item))
        stored = [Written(r, ttl, self.layout.reading_key(r.entity_id, r.ts, r.event_id)) for r in readings]
        self.written.extend(stored)
        return stored

    def expected(self, entity_id: str | None, from_ms: int, to_ms: int) -> list[Written]:
        """Brute force: the live readings in range, once each (the last written), in per-entity time order."""
        seen: dict[tuple[str, str, str], Written] = {}
        for w in self.written:
            r = w.reading
            if (entity_id is None or r.entity_id == entity_id) and from_ms <= r.ts_ms < to_ms and not w.expired:
                seen[(r.entity_id, r.ts, r.event_id)] = w
        return sorted(seen.values(), key=lambda w: (w.reading.ts, w.reading.event_id))

    def expected_range(self, from_ms: int, to_ms: int) -> list[Written]:
        """Brute force for cross-entity reads: bucket, then entity, then time."""
        bucket = self.layout.bucket
        rows = self.expected(None, from_ms, to_ms)
        return sorted(rows, key=lambda w: (max(from_ms, bucket.start(w.reading.ts_ms)), w.key))


def reading(entity: str, ts_ms: int, event: str, **measures: float) -> Reading:
    return Reading.parse(
        {
            "entity_id": entity,
            "timestamp": format_ts(ts_ms),
            "event_id": event,
            "measures": measures or {"v": 1.0},
        }
    )


def summary(items: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(i["entity_id"], i["timestamp"], i["event_id"]) for i in items]


def summary_of(rows: Iterable[Written]) -> list[tuple[str, str, str]]:
    return [(w.reading.entity_id, w.reading.ts, w.reading.event_id) for w in rows]


@contextmanager
def mocked_dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's DynamoDB (see :func:`mocked_aws`), empty, and a client of it."""
    with mocked_aws(monkeypatch, REGION, POWERTOOLS_TRACE_DISABLED="true"):
        yield boto3.client("dynamodb", region_name=REGION)


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with mocked_dynamodb(monkeypatch) as client:
        yield client


def new_store(
    dynamodb: Any,
    kind: str = "hybrid",
    *,
    shards: int = 4,
    bucket: str = "1h",
    table_period: str | None = None,
    shard_map: ShardMap | None = None,
    tables_from: int = NOW - 10 * 24 * HOUR,
    tables_to: int = NOW + 2 * 24 * HOUR,
) -> Store:
    """A store of layout ``kind`` with its tables for ``[tables_from, tables_to)``, empty."""
    layout = Layout.from_settings(kind=kind, bucket=bucket, table_prefix=PREFIX, table_period=table_period)
    store = Store(dynamodb, layout, shard_map or ShardMap.initial(layout.bucket, shards))
    store.create_tables(tables_from, tables_to)
    return store


StoreFactory = Callable[..., Store]


@pytest.fixture
def make_store(dynamodb: Any) -> StoreFactory:
    """Stores (:func:`new_store`) on the test's own moto."""
    return partial(new_store, dynamodb)


@contextmanager
def shared_store(kind: str = "hybrid", **settings: Any) -> Iterator[Store]:
    """A :func:`new_store` on a moto of its own, for a module-scoped fixture whose tests only read it:
    written once rather than for every test (most of what those tests cost). moto's state is one per
    process and a nested ``mock_aws`` does not reset it, so no test of the same module may use a fresh
    moto (``dynamodb``, ``make_store``) while it is open: such tests go in another module."""
    with pytest.MonkeyPatch.context() as monkeypatch, mocked_dynamodb(monkeypatch) as client:
        yield new_store(client, kind, **settings)


def service_for(
    store: Store, *, limits: QueryLimits | None = None, key: bytes = KEY, reader: Any = None
) -> QueryService:
    return QueryService(
        layout=store.layout,
        shard_maps=StaticShardMap(store.shard_map),
        reader=reader or DynamoPartitionReader(store.dynamodb),
        cursors=CursorCodec(lambda: key),
        limits=limits or QueryLimits(),
        clock_ms=lambda: NOW,
    )


def api_for(store: Store, **kwargs: Any) -> ApiClient:
    return ApiClient(create_app(service_for(store, **kwargs)).resolve)


def pages(
    api: ApiClient, path: str, *, max_pages: int = 10_000, **params: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Follow ``next_cursor`` to the end; return every item and every page body."""
    items: list[dict[str, Any]] = []
    bodies: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(max_pages):
        query = dict(params)
        if cursor is not None:
            query["cursor"] = cursor
        reply = api.get(path, **query)
        assert reply.status == 200, reply.body
        bodies.append(reply.body)
        items.extend(reply.body["items"])
        cursor = reply.body["next_cursor"]
        if cursor is None:
            return items, bodies
    raise AssertionError("pagination did not end")
