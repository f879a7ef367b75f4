"""In-memory stand-ins for DynamoDB, for the benchmarks and tests.

:class:`MemoryDynamo` answers the low-level client calls the functions make (item shapes as the
client sends them), its items kept per partition: a Query reads its own, so a simulated year of
control items costs it no more than a minute's. It refuses what DynamoDB refuses, with the
``ClientError`` botocore raises: a BatchWriteItem of more than 25 requests or with a key twice
(``ValidationException``), a table that does not exist (``ResourceNotFoundException``, when
``tables`` names the tables), a put whose ``attribute_not_exists(pk)`` condition fails
(``ConditionalCheckFailedException``), and any item the ``refuse`` hook names a reason for
(``ValidationException``, the whole BatchWriteItem, as DynamoDB fails a call for one bad item).
Query supports ``pk = :pk`` with an optional ``sk BETWEEN :low AND :high`` or
``begins_with(sk, :prefix)``, and pages of ``page_items``; BatchGetItem leaves keys past
``get_limit`` unprocessed. Write units are counted per kind of partition key (the text before
its first ``#``); reads and BatchWriteItem report the units DynamoDB would (item sizes by its
rules, 1 KB write and 4 KB read units). With ``record_calls``, ``calls`` holds every
BatchWriteItem's ``RequestItems`` (refused ones too); ``items_put`` counts the puts stored, and
:meth:`MemoryDynamo.table` and :meth:`MemoryDynamo.items` show what is stored.
:meth:`MemoryDynamo.expire` deletes what DynamoDB's TTL would (``expires_at`` passed).
Thread-safe, as the batch writer's threads need.

:class:`MemoryReader` is a :class:`adapters.partition_reader.PartitionReader` over blocks
kept in memory, with DynamoDB's Query semantics (below).
"""

from __future__ import annotations

import bisect
import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from adapters.partition_reader import Page, PageRequest, StoredBlock, effective_bounds
from adapters.rollup_store import plain
from keydesign import Block, Layout, Reading, ShardMap, item_size, read_units, write_units
from keydesign.writetier import ROLLUP_OWNED

#: DynamoDB stops a Query page once it has read this much.
PAGE_BYTES = 1024 * 1024
#: A Kinesis sequence number (56 digits, as a shard's are): block versions are of this size,
#: which is what a block's header carries and what decoding it reads.
SEQUENCE_BASE = 49_590_338_271_490_256_608_559_692_538_361_571_095_921_575_989_136_588_898


def _size(item: dict[str, Any]) -> int:
    return item_size({k: v["B"] if "B" in v else plain(v) for k, v in item.items()})


def client_error(code: str, operation: str, message: str) -> ClientError:
    """The ``ClientError`` botocore raises when an AWS service refuses a call with ``code``."""
    return ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": 400}}, operation
    )


def _key(request: dict[str, Any]) -> tuple[str, str]:
    """The (pk, sk) a BatchWriteItem request writes or deletes."""
    key = request["PutRequest"]["Item"] if "PutRequest" in request else request["DeleteRequest"]["Key"]
    return key["pk"]["S"], key["sk"]["S"]


# ruff: noqa: N803  (the client's own parameter names)


class MemoryDynamo:
    def __init__(
        self,
        *,
        tables: set[str] | None = None,
        refuse: Callable[[Mapping[str, Any]], str | None] | None = None,
        page_items: int = 7,
        get_limit: int = 40,
        record_calls: bool = False,
    ) -> None:
        """``tables``: the tables that exist (None: any table does); ``refuse``: why DynamoDB would refuse an
        item a BatchWriteItem puts, or None to take it; ``record_calls``: keep every BatchWriteItem's
        ``RequestItems`` in ``calls`` (else None: a simulated year's calls would fill the memory)."""
        self.partitions: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.tables = tables
        self.refuse = refuse
        self.page_items = page_items
        self.get_limit = get_limit
        self.write_units: Counter[str] = Counter()
        self._calls: list[dict[str, list[dict[str, Any]]]] | None = [] if record_calls else None
        self.items_put = 0
        self._lock = threading.Lock()

    @property
    def calls(self) -> list[dict[str, list[dict[str, Any]]]]:
        """Every BatchWriteItem's ``RequestItems`` (refused ones too), oldest first."""
        if self._calls is None:
            raise AttributeError("calls are recorded by a MemoryDynamo(record_calls=True) only")
        return self._calls

    def _exists(self, table: str, operation: str) -> None:
        if self.tables is not None and table not in self.tables:
            raise client_error("ResourceNotFoundException", operation, "Requested resource not found")

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        table, item = kwargs["TableName"], kwargs["Item"]
        self._exists(table, "PutItem")
        condition = kwargs.get("ConditionExpression")
        if condition not in (None, "attribute_not_exists(pk)"):
            raise NotImplementedError(f"MemoryDynamo does not evaluate the condition {condition!r}")
        with self._lock:
            if condition is not None and self._item(table, item) is not None:
                raise client_error("ConditionalCheckFailedException", "PutItem", "The conditional request failed")
            self._tally(item)
            self._store(table, item)
        return {}

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        self._exists(kwargs["TableName"], "GetItem")
        found = self._item(kwargs["TableName"], kwargs["Key"])
        return {"Item": found} if found is not None else {}

    def batch_write_item(self, **kwargs: Any) -> dict[str, Any]:
        request_items: dict[str, list[dict[str, Any]]] = kwargs["RequestItems"]
        if self._calls is not None:
            self._calls.append(request_items)
        keys = [(table, *_key(request)) for table, requests in request_items.items() for request in requests]
        if len(keys) > 25:
            raise client_error(
                "ValidationException", "BatchWriteItem", "Too many items requested for the BatchWriteItem call"
            )
        if len(set(keys)) != len(keys):
            raise client_error(
                "ValidationException", "BatchWriteItem", "Provided list of item keys contains duplicates"
            )
        for table in request_items:
            self._exists(table, "BatchWriteItem")
        refuse = self.refuse or (lambda _: None)
        refused = [
            why
            for requests in request_items.values()
            for request in requests
            if "PutRequest" in request and (why := refuse(request["PutRequest"]["Item"]))
        ]
        if refused:
            raise client_error("ValidationException", "BatchWriteItem", refused[0])
        consumed = dict.fromkeys(request_items, 0.0)
        with self._lock:
            for table, requests in request_items.items():
                for request in requests:
                    if "PutRequest" in request:
                        consumed[table] += self._tally(request["PutRequest"]["Item"])
                        self._store(table, request["PutRequest"]["Item"])
                    else:
                        self._delete(table, request["DeleteRequest"]["Key"])
        return {
            "UnprocessedItems": {},
            "ConsumedCapacity": [{"TableName": table, "CapacityUnits": units} for table, units in consumed.items()],
        }

    def delete_item(self, *, TableName: str, Key: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._exists(TableName, "DeleteItem")
        with self._lock:
            self._delete(TableName, Key)
        return {}

    def _delete(self, table: str, key: dict[str, Any]) -> None:
        self.partitions.get((table, key["pk"]["S"]), {}).pop(key["sk"]["S"], None)

    def _tally(self, item: dict[str, Any]) -> int:
        """Count the write units of a put of ``item``; return them."""
        units = write_units(_size(item))
        self.write_units[item["pk"]["S"].split("#", 1)[0]] += units
        return units

    def _store(self, table: str, item: dict[str, Any]) -> None:
        self.items_put += 1
        self.partitions.setdefault((table, item["pk"]["S"]), {})[item["sk"]["S"]] = item

    def _item(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        return self.partitions.get((table, key["pk"]["S"]), {}).get(key["sk"]["S"])

    def items(self, table: str | None = None) -> list[dict[str, Any]]:
        """Every item stored (in ``table``)."""
        return [i for (t, _), rows in self.partitions.items() if table in (None, t) for i in rows.values()]

    def table(self, name: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The items stored in table ``name``, by (pk, sk)."""
        return {(pk, sk): item for (t, pk), rows in self.partitions.items() if t == name for sk, item in rows.items()}

    def expire(self, now_s: int, attribute: str = "expires_at") -> None:
        """Delete the items whose TTL ``attribute`` has passed, as DynamoDB's TTL does."""
        for key, rows in list(self.partitions.items()):
            expired = [sk for sk, item in rows.items() if int(item.get(attribute, {"N": now_s})["N"]) < now_s]
            for sk in expired:
                del rows[sk]
            if not rows:
                del self.partitions[key]

    def batch_get_item(self, *, RequestItems: dict[str, Any], **_: Any) -> dict[str, Any]:
        ((table, request),) = RequestItems.items()
        self._exists(table, "BatchGetItem")
        keys = request["Keys"]
        found = [item for k in keys[: self.get_limit] if (item := self._item(table, k)) is not None]
        rest = keys[self.get_limit :]
        return {
            "Responses": {table: found},
            "UnprocessedKeys": {table: {"Keys": rest}} if rest else {},
            # Each key is a GetItem's worth: at least one 4 KB unit, found or not.
            "ConsumedCapacity": [
                {
                    "CapacityUnits": sum(
                        read_units(_size(item), consistent=request.get("ConsistentRead", False)) for item in found
                    )
                    + read_units(0) * (len(keys[: self.get_limit]) - len(found))
                }
            ],
        }

    def query(self, **kwargs: Any) -> dict[str, Any]:
        """A Query of one partition: the rollup store's ``:low``/``:high``/``:prefix`` conditions and the
        partition reader's ``:sk_low``/``:sk_high`` (either bound alone too), its order, ``Limit`` and TTL
        filter (``:now``); projections are not applied (every attribute comes back)."""
        table = kwargs["TableName"]
        self._exists(table, "Query")
        values = {name: value.get("S", value.get("N")) for name, value in kwargs["ExpressionAttributeValues"].items()}
        pk = values[":pk"]
        low = values.get(":low", values.get(":sk_low"))
        high = values.get(":high", values.get(":sk_high"))
        prefix = values.get(":prefix", "")
        now = values.get(":now")
        start = kwargs.get("ExclusiveStartKey", {}).get("sk", {}).get("S")
        forward = kwargs.get("ScanIndexForward", True)
        with self._lock:
            partition = list(self.partitions.get((table, pk), {}).items())
        rows = sorted(
            (
                (sk, item)
                for sk, item in partition
                if (low is None or low <= sk)
                and (high is None or sk <= high)
                and (start is None or (sk > start if forward else sk < start))
                and sk.startswith(prefix)
            ),
            reverse=not forward,
        )
        scanned = rows[: min(self.page_items, kwargs.get("Limit", self.page_items))]
        page = [item for _, item in scanned if now is None or "ttl" not in item or int(item["ttl"]["N"]) >= int(now)]
        units = read_units(sum(_size(item) for item in page), consistent=kwargs.get("ConsistentRead", False))
        out: dict[str, Any] = {
            "Items": page,
            "ScannedCount": len(scanned),
            "ConsumedCapacity": {"CapacityUnits": units},
        }
        if len(rows) > len(scanned):
            out["LastEvaluatedKey"] = {"pk": {"S": pk}, "sk": scanned[-1][1]["sk"]}
        return out


@dataclass(frozen=True, slots=True)
class _Stored:
    sk: str
    block: StoredBlock
    size: int
    ttl: int | None


class MemoryReader:
    """Blocks in memory, read with DynamoDB's Query semantics.

    Blocks are kept per (table, pk), sorted by sort key; storing a block under a key that
    exists overwrites it (a redelivered batch). A page reads at most ``Limit`` blocks,
    ``page_items`` (standing in for the 1 MB cap in tests) and 1 MB, counts them,
    then applies the TTL filter, and returns a ``next_key`` whenever it stopped early,
    as DynamoDB does (including when the stop happened to be at the very end, so
    callers must cope with a last, empty page). Read units follow the evaluated
    blocks' sizes. A table no block was stored in (and not in ``tables``) is missing.
    ``requests`` records every request (thread-safe).
    """

    def __init__(self, page_items: int | None = None) -> None:
        self.page_items = page_items
        self.partitions: dict[tuple[str, str], list[_Stored]] = {}
        self.tables: set[str] = set()
        self.requests: list[PageRequest] = []
        self._lock = threading.Lock()

    def add(self, blocks: Iterable[Block]) -> None:
        for block in blocks:
            key = block.key
            self._put(
                key.table, key.pk, _Stored(key.sk, StoredBlock(key.sk, block.encoded.payload), block.size, block.ttl)
            )

    def add_item(self, table: str, item: dict[str, Any]) -> None:
        """Store an item in plain values (``keydesign.blocks.block_item``'s shape: a block, a write-tier
        group item, cluster or compacted block, flagged or not, or an item without a payload such as a dense
        mark)."""
        sk, ttl = str(item["sk"]), item.get("ttl")
        payload = item.get("b", b"")
        owned = item.get(ROLLUP_OWNED)
        stored = StoredBlock(
            sk,
            payload if isinstance(payload, bytes) else b"",
            rollups=owned == 1,
            rollup_entities=frozenset(owned) if isinstance(owned, set | frozenset) else frozenset(),
        )
        self._put(table, str(item["pk"]), _Stored(sk, stored, item_size(item), None if ttl is None else int(ttl)))

    def add_legacy(self, table: str, item: dict[str, Any]) -> None:
        """Store an item of the format before blocks (one reading; DynamoDB JSON, ``keydesign.legacy``)."""
        sk, ttl = item["sk"]["S"], item.get("ttl")
        self._put(table, item["pk"]["S"], _Stored(sk, StoredBlock(sk, b"", item), _size(item), ttl and int(ttl["N"])))

    def _put(self, table: str, pk: str, stored: _Stored) -> None:
        self.tables.add(table)
        rows = self.partitions.setdefault((table, pk), [])
        at = bisect.bisect_left(rows, stored.sk, key=lambda row: row.sk)
        if at < len(rows) and rows[at].sk == stored.sk:
            rows[at] = stored
        else:
            rows.insert(at, stored)

    def store(
        self,
        layout: Layout,
        shard_map: ShardMap,
        entries: Sequence[tuple[Reading, int]],
        *,
        retention_ms: int | None = None,
        rng: random.Random | None = None,
    ) -> list[Block]:
        """Store ``entries`` (reading, version) as one ingest batch does: the blocks ``layout.pack`` makes."""
        blocks = layout.pack(entries, shard_map, retention_ms=retention_ms, rng=rng)
        self.add(blocks)
        return blocks

    def read_page(self, request: PageRequest) -> Page:
        with self._lock:
            self.requests.append(request)
        part = request.partition
        if part.table not in self.tables:
            return Page((), None, 0, 0.0, table_missing=True)
        rows = self.partitions.get((part.table, part.pk), [])
        low, high = effective_bounds(request)
        if low is not None and high is not None and low > high:
            return Page((), None, 0, 0.0)
        lo = 0 if low is None else bisect.bisect_left(rows, low, key=lambda row: row.sk)
        hi = len(rows) if high is None else bisect.bisect_right(rows, high, key=lambda row: row.sk)
        start = request.start_key["sk"]["S"] if request.start_key is not None else None
        if request.descending:
            if start is not None:
                hi = min(hi, bisect.bisect_left(rows, start, key=lambda row: row.sk))
            selected = rows[lo:hi][::-1]
        else:
            if start is not None:
                lo = max(lo, bisect.bisect_right(rows, start, key=lambda row: row.sk))
            selected = rows[lo:hi]
        caps = [c for c in (self.page_items, request.limit) if c is not None]
        cap = min(caps) if caps else None
        evaluated: list[_Stored] = []
        size = 0
        for row in selected if cap is None else selected[:cap]:
            evaluated.append(row)
            size += row.size
            if size >= PAGE_BYTES:
                break
        # Stopped by Limit exactly at the end, DynamoDB still hands back a key: it did not look further.
        stopped_early = len(evaluated) < len(selected) or len(evaluated) == cap
        now = request.now_epoch_s
        blocks = tuple(row.block for row in evaluated if now is None or row.ttl is None or row.ttl >= now)
        next_key = {"pk": {"S": part.pk}, "sk": {"S": evaluated[-1].sk}} if stopped_early and evaluated else None
        units = read_units(size, consistent=request.consistent)
        return Page(blocks, next_key, len(evaluated), units)
