"""Blocks: many readings of one entity in one compressed item.

A reading alone in an item pays a whole write unit (1 KB) for ~180 bytes, and 100
bytes of per-item storage overhead on top. A *block* holds the readings one ingest
batch has of one entity, in one partition and one bucket, packed by column and
compressed: a tenth of the write units and of the bytes stored per reading.

Which readings share a block (see :meth:`keydesign.Layout.pack`):

* one entity, one partition key, one bucket (so a block never straddles a table
  period or a shard-map change, which happen at bucket boundaries);
* a *span* under :data:`MAX_BLOCK_SPAN_MS`: the readings of a block lie in
  ``[first, first + MAX_BLOCK_SPAN_MS)``. Readers use that bound: a block that
  starts before a range by more than the span cannot hold any of it;
* at most :data:`MAX_BLOCK_READINGS` readings and :data:`MAX_BLOCK_ITEM_BYTES`
  bytes (DynamoDB's own size); a larger group becomes several blocks (a single
  reading larger than that is a block of its own: the reading limits keep it
  far below DynamoDB's 400 KB).

The item::

    pk   S  the partition key the layout chooses
    sk   S  hybrid: <entity>#<first ts>#<block id>#<write units>
            random, calculated: <first ts>#<block id>#<write units>
    b    B  the payload (below)
    ttl  N  expiry of the block's newest reading, epoch seconds

``<first ts>`` is the fixed-width UTC time of the block's oldest reading, so blocks
sort by where they start. ``<block id>`` is 12 hex digits of SHA-256 over the
entity, the version and the uncompressed body (48 bits: two blocks collide only if
they share a partition, an entity and a first millisecond as well): the same readings with the same
version make the same block, so a redelivered batch overwrites its own blocks.
``<write units>`` is what a put of the item is billed (1 per KB, rounded up): the
hot-key detector reads it from the key, since the table's stream is ``KEYS_ONLY``.

The payload (all integers unsigned LEB128 varints)::

    0x01 | 0x02               format: 1, the body is raw DEFLATE (RFC 1951); 2, the body as is
                              (a small body that DEFLATE would not shrink)
    varint  count             readings in the block (>= 1)
    varint  first_ms          epoch ms of the oldest reading
    varint  span_ms           newest minus oldest
    byte n, then n bytes      version: the largest Kinesis sequence number among the readings,
                              unsigned big-endian (a 56-digit sequence number takes 24 bytes)
    body: a UTF-8 JSON array [deltas, measures, event_ids, dimensions], trailing nulls left out
      deltas      [int]                   ms from the previous reading (the first: 0)
      measures    {name: [number|null]}   null: the reading has no such measure
      event_ids   null | [str|null]       null: every id is the derived one; null entry: that one is
      dimensions  null | {name: [str|null]}

Readings are stored in (time, event id) order, once each. A *derived* event id (a
reading sent without one: ``keydesign.model.derive_event_id``) is not stored: the
reader computes it again from the content. The version orders two copies of one
reading that ended up in two blocks (a regrouped redelivery, a correction): the
copy in the block of the higher version wins. Ingest gives a block the largest
sequence number of the Kinesis records its readings came from; since a Lambda
batch is a contiguous run of one shard, and ingest keeps only the last copy of a
reading within a batch, the highest version always holds the copy published last.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .errors import KeyDesignError
from .items import item_size, write_units
from .model import Reading, derive_event_id

#: The payload's first byte: how its body is stored.
DEFLATED = 1
RAW = 2
#: A block's readings lie within this much of its first one.
MAX_BLOCK_SPAN_MS = 10_000
#: Readings in one block at most: what a reader decodes to get at one of them.
MAX_BLOCK_READINGS = 1_000
#: A block's item size (DynamoDB's accounting) at most, unless it holds one reading.
MAX_BLOCK_ITEM_BYTES = 64 * 1024
#: Hex digits of the block id.
BLOCK_ID_DIGITS = 12
#: Sorts after every character of a block sort key's tail: closes a range at an instant.
HIGH = "~"
_LEVEL = 6


class BlockError(KeyDesignError):
    """A stored block that cannot be decoded (corrupt, truncated, or a format this code does not know)."""


@dataclass(frozen=True, slots=True)
class BlockHeader:
    """The uncompressed head of a payload: enough to decide whether to decode the body."""

    count: int
    first_ms: int
    span_ms: int
    version: int
    body_at: int

    @property
    def last_ms(self) -> int:
        return self.first_ms + self.span_ms


@dataclass(frozen=True, slots=True)
class Encoded:
    """One block's payload and the facts its key needs."""

    payload: bytes
    block_id: str
    first_ms: int
    last_ms: int


# -- varints ------------------------------------------------------------------------------


def _varint(value: int, out: bytearray) -> None:
    if value < 0:
        raise ValueError("varints are unsigned")
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise BlockError("b", "the payload ends inside its header")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:  # no header varint this format writes needs more than 64 bits
            raise BlockError("b", "a header number is longer than any this format writes")


# -- encoding -------------------------------------------------------------------------------


def encode_block(readings: Sequence[Reading], version: int) -> Encoded:
    """The payload of a block holding ``readings`` (one entity, sorted by time then event id,
    no two with the same time and event id) published as ``version``."""
    if not readings:
        raise ValueError("a block holds at least one reading")
    entity = readings[0].entity_id
    first = readings[0].ts_ms
    deltas: list[int] = []
    ids: list[str | None] = []
    measure_names: dict[str, None] = {}
    dimension_names: dict[str, None] = {}
    previous = first
    stored_ids = False
    for reading in readings:
        deltas.append(reading.ts_ms - previous)
        previous = reading.ts_ms
        event_id = reading.event_id
        if event_id.startswith("h-") and event_id == derive_event_id(
            reading.entity_id, reading.ts_ms, reading.measures, reading.dimensions
        ):
            ids.append(None)
        else:
            ids.append(event_id)
            stored_ids = True
        measure_names.update(dict.fromkeys(reading.measures))
        if reading.dimensions:
            dimension_names.update(dict.fromkeys(reading.dimensions))
    measures = {name: [r.measures.get(name) for r in readings] for name in sorted(measure_names)}
    dimensions = (
        {name: [r.dimensions.get(name) for r in readings] for name in sorted(dimension_names)}
        if dimension_names
        else None
    )
    columns: list[object] = [deltas, measures, ids if stored_ids else None, dimensions]
    while columns[-1] is None:
        columns.pop()
    body = json.dumps(columns, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)
    deflated = packer.compress(body) + packer.flush()
    head = bytearray([DEFLATED if len(deflated) < len(body) else RAW])
    for number in (len(readings), first, previous - first):
        _varint(number, head)
    version_bytes = version.to_bytes(max(1, (version.bit_length() + 7) // 8), "big")
    head.append(len(version_bytes))
    head += version_bytes
    digest = hashlib.sha256(f"{entity}\n{version}\n".encode() + body).hexdigest()[:BLOCK_ID_DIGITS]
    payload = bytes(head) + (deflated if head[0] == DEFLATED else body)
    return Encoded(payload, digest, first, previous)


def read_header(payload: bytes) -> BlockHeader:
    """The header of ``payload``; raises :class:`BlockError` when it is not a block this code reads."""
    if not payload:
        raise BlockError("b", "the payload is empty")
    if payload[0] not in (DEFLATED, RAW):
        raise BlockError("b", f"block format {payload[0]} is not one this code reads ({DEFLATED} or {RAW})")
    count, pos = _read_varint(payload, 1)
    first, pos = _read_varint(payload, pos)
    span, pos = _read_varint(payload, pos)
    if pos >= len(payload) or pos + 1 + payload[pos] > len(payload):
        raise BlockError("b", "the payload ends inside its header")
    version = int.from_bytes(payload[pos + 1 : pos + 1 + payload[pos]], "big")
    pos += 1 + payload[pos]
    if count < 1:
        raise BlockError("b", "the header counts no readings")
    return BlockHeader(count, first, span, version, pos)


def decode_block(entity_id: str, payload: bytes) -> tuple[BlockHeader, list[Reading]]:
    """The header and the readings of a block of ``entity_id``, in stored order (time, then event id).

    Raises :class:`BlockError` naming what is wrong when the payload is not a whole,
    well-formed block.
    """
    header = read_header(payload)
    raw = payload[header.body_at :]
    try:
        body = json.loads(zlib.decompress(raw, -15) if payload[0] == DEFLATED else raw)
    except (zlib.error, ValueError) as exc:
        raise BlockError("b", f"the body does not decompress to JSON ({exc})") from None
    if not isinstance(body, list) or not 2 <= len(body) <= 4:
        raise BlockError("b", "the body is not the columns of a block")
    deltas, measures, ids, dimensions = [*body, None, None][:4]
    count = header.count
    if not isinstance(deltas, list) or len(deltas) != count or not isinstance(measures, dict):
        raise BlockError("b", f"the body's columns do not hold the {count} readings the header counts")
    columns = list(measures.items())
    dimension_columns = list(dimensions.items()) if isinstance(dimensions, dict) else []
    for _, column in (*columns, *dimension_columns):
        if not isinstance(column, list) or len(column) != count:
            raise BlockError("b", f"a column does not hold the {count} readings the header counts")
    if ids is not None and (not isinstance(ids, list) or len(ids) != count):
        raise BlockError("b", f"the event ids do not number the {count} readings the header counts")
    out: list[Reading] = []
    ts = header.first_ms
    for index in range(count):
        ts += deltas[index]
        reading_measures = {name: column[index] for name, column in columns if column[index] is not None}
        reading_dimensions = (
            {name: column[index] for name, column in dimension_columns if column[index] is not None}
            if dimension_columns
            else {}
        )
        event_id = ids[index] if ids is not None else None
        if event_id is None:
            event_id = derive_event_id(entity_id, ts, reading_measures, reading_dimensions)
        out.append(Reading(entity_id, event_id, ts, reading_measures, reading_dimensions))
    if ts != header.last_ms:
        raise BlockError("b", "the readings' times do not end where the header says")
    return header, out


# -- the item -------------------------------------------------------------------------------


def block_item(pk: str, sk: str, payload: bytes, ttl_epoch_s: int | None) -> dict[str, object]:
    """The stored item of a block, in plain Python values (``b`` as bytes)."""
    item: dict[str, object] = {"pk": pk, "sk": sk, "b": payload}
    if ttl_epoch_s is not None:
        item["ttl"] = ttl_epoch_s
    return item


def keyed_item(pk: str, sk_stem: str, payload: bytes, ttl_epoch_s: int | None) -> tuple[dict[str, object], int, int]:
    """The item of a block whose sort key is ``sk_stem`` and then ``#<write units>``, with its
    size and write units: the units' own digits count in the size they are computed from."""
    units = 1
    while True:
        item = block_item(pk, f"{sk_stem}#{units}", payload, ttl_epoch_s)
        size = item_size(item)
        if write_units(size) == units:
            return item, size, units
        units = write_units(size)


def newest_wins(copies: Mapping[tuple[str, int, str], tuple[int, Reading]]) -> list[Reading]:
    """The readings of a de-duplicated map (reading identity -> (version, reading)), in
    (entity, time, event id) order."""
    return [copies[key][1] for key in sorted(copies)]


def keep_newest(
    copies: dict[tuple[str, int, str], tuple[int, Reading]], version: int, readings: Sequence[Reading]
) -> None:
    """Merge ``readings`` of a block of ``version`` into ``copies``: of two copies of one reading
    (same entity, time and event id) the one of the higher version stays."""
    for reading in readings:
        key = (reading.entity_id, reading.ts_ms, reading.event_id)
        held = copies.get(key)
        if held is None or version > held[0]:
            copies[key] = (version, reading)
