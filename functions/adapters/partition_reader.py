"""Reading one partition of the readings table: the query Lambda's data access.

One call reads one page (at most 1 MB, or ``limit`` blocks) of one
:class:`keydesign.PartitionQuery`; the caller follows ``next_key`` (DynamoDB's
``LastEvaluatedKey``) for the next page. Every item is a block of readings
(:mod:`keydesign.blocks`): a page hands back each block's sort key and payload,
undecoded, so the caller decodes only the blocks it needs (:func:`decode`). An item
of the format before blocks (one reading, its attributes ``e``, ``t``, ``i``, ``m``,
``d``: a table deployed before blocks still holds them) is handed back with those
attributes, and :func:`header_of` and :func:`decode` read it as a block of that one
reading, older than every block (:mod:`keydesign.legacy`): every reader gets both
formats from here.
Everything the request carries goes into ``ExpressionAttributeNames`` /
``ExpressionAttributeValues``: no value and no attribute name is ever pasted
into an expression string.

The one filter applied on the server hides expired blocks (``ttl`` below now,
epoch seconds), because DynamoDB deletes them up to a couple of days late. A
block's ``ttl`` is its newest reading's expiry, so a live block may still hold
expired readings, and any block may hold readings outside the requested time
range: the caller drops those once decoded.

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

from adapters.clients import client, error_code
from keydesign import BlockError, PartitionQuery, Reading, decode_block
from keydesign.blocks import BlockHeader, decode_group, read_header
from keydesign.layouts import GROUPED_KINDS
from keydesign.legacy import is_legacy, legacy_block
from keydesign.writetier import ROLLUP_OWNED


@dataclass(frozen=True, slots=True)
class StoredBlock:
    """One item as read back: the block's sort key and its payload (``b``), not yet decoded; or,
    for an item of the format before blocks, its attributes (``legacy``, DynamoDB JSON)."""

    sk: str
    payload: bytes
    legacy: Mapping[str, Any] | None = None
    #: A compacted block whose entity's hour is the rollup function's (``keydesign.writetier.ROLLUP_OWNED``).
    rollups: bool = False
    #: A cluster block's entities whose hour is the rollup function's (its ``ROLLUP_OWNED`` string set).
    rollup_entities: frozenset[str] = frozenset()

    def owned_by_rollups(self, entity_id: str) -> bool:
        """Whether ``entity_id``'s hour in this compacted or cluster block is the rollup function's."""
        return self.rollups or entity_id in self.rollup_entities


class CorruptBlock(Exception):  # noqa: N818 - reads as the condition
    """A stored item in a readings partition that is not a block this code can read.

    Its readings cannot be returned, and leaving them out would hand back a range
    with a silent hole: the read fails instead, naming the item, so an operator can
    look at it (``table``, ``pk``, ``sk``) and ``reason`` says what is wrong.
    """

    def __init__(self, table: str, pk: str, sk: str, reason: str) -> None:
        self.table, self.pk, self.sk, self.reason = table, pk, sk, reason
        super().__init__(f"the item {pk!r} / {sk!r} of table {table!r} is not a readable block: {reason}")


def header_of(partition: PartitionQuery, block: StoredBlock) -> BlockHeader:
    """The header of ``block`` (cheap: no decompression); :class:`CorruptBlock` when it has none.
    The partition's kind says what the item must be: a block, a group item, a sub-item, a cluster block or a
    compacted block."""
    try:
        if block.legacy is not None and partition.kind == "blocks":
            return legacy_block(block.legacy)[0]
        grouped = partition.kind in GROUPED_KINDS
        return read_header(block.payload, span_limit_ms=partition.span_limit_ms, group=grouped)
    except BlockError as exc:
        raise CorruptBlock(partition.table, partition.pk, block.sk, exc.reason) from None


def decode(partition: PartitionQuery, block: StoredBlock, entity_id: str | None) -> tuple[BlockHeader, list[Reading]]:
    """The header and readings of ``block`` of ``entity_id``; :class:`CorruptBlock` when it does not decode.

    A group item, a sub-item or a cluster block (the write tier's) holds many entities' readings: only
    ``entity_id``'s are kept, every one when it is None (a cross-entity read), in the item's order (time,
    entity, event id). A block's entity is not stored in it: ``entity_id`` names it and may not be None."""
    try:
        if partition.kind in GROUPED_KINDS:
            return decode_group(block.payload, entity_id, span_limit_ms=partition.span_limit_ms)
        if entity_id is None:
            raise ValueError("a block's readings need the entity its key names")
        if block.legacy is not None and partition.kind == "blocks":
            header, reading = legacy_block(block.legacy)
            return header, [reading]
        return decode_block(entity_id, block.payload, span_limit_ms=partition.span_limit_ms)
    except BlockError as exc:
        raise CorruptBlock(partition.table, partition.pk, block.sk, exc.reason) from None


@dataclass(frozen=True, slots=True)
class PageRequest:
    """One Query call.

    ``sk_low`` / ``sk_high`` (inclusive) narrow the partition's own block
    sort-key range, for a read that resumes inside it; ``limit`` counts blocks;
    ``now_epoch_s`` turns on the TTL filter.
    """

    partition: PartitionQuery
    descending: bool = False
    consistent: bool = False
    limit: int | None = None
    sk_low: str | None = None
    sk_high: str | None = None
    now_epoch_s: int | None = None
    start_key: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """What one Query call returned: blocks in the request's sort-key order."""

    blocks: tuple[StoredBlock, ...]
    next_key: Mapping[str, Any] | None
    scanned: int
    read_units: float
    table_missing: bool = False


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


def build_query(request: PageRequest) -> dict[str, Any] | None:
    """The keyword arguments of the DynamoDB ``Query`` call for ``request``, or
    None when the narrowed sort-key range is empty (nothing to ask for)."""
    low, high = effective_bounds(request)
    if low is not None and high is not None and low > high:
        return None
    names = {"#pk": "pk", "#sk": "sk", "#b": "b", "#e": "e", "#t": "t", "#i": "i", "#m": "m", "#d": "d", "#r": "r"}
    values: dict[str, dict[str, str]] = {":pk": {"S": request.partition.pk}}
    key = "#pk = :pk"
    if low is not None:
        values[":sk_low"] = {"S": low}
    if high is not None:
        values[":sk_high"] = {"S": high}
    if low is not None and high is not None:
        key += " AND #sk BETWEEN :sk_low AND :sk_high"
    elif low is not None:
        key += " AND #sk >= :sk_low"
    elif high is not None:
        key += " AND #sk <= :sk_high"
    kwargs: dict[str, Any] = {
        "TableName": request.partition.table,
        "KeyConditionExpression": key,
        # A block has sk and b (a compacted block r too); an item of the format before blocks, sk and e, t, i, m, d.
        "ProjectionExpression": "#sk, #b, #e, #t, #i, #m, #d, #r",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": not request.descending,
        "ConsistentRead": request.consistent,
        "ReturnConsumedCapacity": "TOTAL",
    }
    if request.now_epoch_s is not None:
        names["#ttl"] = "ttl"
        values[":now"] = {"N": str(request.now_epoch_s)}
        # DynamoDB's own rule: an item is expired once its ttl is below now.
        kwargs["FilterExpression"] = "attribute_not_exists(#ttl) OR #ttl >= :now"
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
            return Page((), None, 0, 0.0)
        dynamodb = self._dynamodb if self._dynamodb is not None else client("dynamodb", pool=self._pool)
        try:
            response = dynamodb.query(**kwargs)
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return Page((), None, 0, 0.0, table_missing=True)
            raise
        blocks = tuple(_stored(raw) for raw in response.get("Items", ()))
        consumed = response.get("ConsumedCapacity") or {}
        return Page(
            blocks=blocks,
            next_key=response.get("LastEvaluatedKey"),
            scanned=int(response.get("ScannedCount", len(blocks))),
            read_units=float(consumed.get("CapacityUnits", 0.0)),
        )


def _stored(raw: Mapping[str, Any]) -> StoredBlock:
    """An item as the low-level client returns it. One without a binary payload that is not of the
    format before blocks is handed on with an empty payload: decoding it fails loudly
    (:class:`CorruptBlock`) rather than leaving a hole in the range."""
    sk = raw["sk"]["S"]
    if is_legacy(raw):
        return StoredBlock(sk, b"", legacy=raw)
    owned = raw.get(ROLLUP_OWNED, {})
    return StoredBlock(
        sk,
        raw.get("b", {}).get("B", b""),
        rollups=owned.get("N") == "1",
        rollup_entities=frozenset(owned.get("SS", ())),
    )
