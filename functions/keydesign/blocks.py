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

The payload, format 3 (what this code writes; all integers unsigned LEB128 varints)::

    0x03                      the format's version: a payload of any other version than 1, 2 or 3 is
                              refused, naming it (a newer writer's block is never misread)
    byte codec                0: the body is raw DEFLATE (RFC 1951); 1: the body as is (a small body
                              that DEFLATE would not shrink)
    varint  count             readings in the block, 1 .. MAX_BLOCK_READINGS
    varint  first_ms          epoch ms of the oldest reading
    varint  span_ms           newest minus oldest, below MAX_BLOCK_SPAN_MS
    byte n, then n bytes      version: the largest Kinesis sequence number among the readings,
                              unsigned big-endian (a 56-digit sequence number takes 24 bytes)
    4 bytes                   CRC-32 (zlib.crc32), big-endian, of every other byte of the payload
    body: a UTF-8 JSON array [deltas, measures, event_ids, dimensions], trailing nulls left out
      deltas      [int]                   ms from the previous reading (the first: 0)
      measures    {name: column}          a column of numbers, one per reading that has the measure
      event_ids   null | [str|null]       null: every id is the derived one; null entry: that one is
      dimensions  null | {name: column}   a column of strings
    a column is dense, [value|null] with one entry a reading (null: the reading has no such name), or,
    when fewer than half the readings have the name, sparse: {"i": [index], "v": [value]}, the
    readings' indexes ascending. So the body grows with the names the readings hold, not with
    readings x names: packing and decoding are linear in the readings' size for any mix of names.

Formats 1 and 2, written before format 3 and still read: byte 0 was the codec (1: DEFLATE, 2: as
is), with no codec byte and no checksum; every column is dense. A format-3 payload whose byte 0 is
damaged into a 1 or a 2 is still refused: read as format 1 or 2, its codec byte is the count (0,
no readings) or, for a body stored as is, its first_ms varint is the span (past the 10 s any block
may span).

Decoding checks everything, for every format, and raises :class:`BlockError` naming what is wrong
instead of returning readings that were not written: the checksum (format 3); the header (count
1 .. MAX_BLOCK_READINGS, span below MAX_BLOCK_SPAN_MS, times within 9999); that the body is one
whole DEFLATE stream (or the body as is) of UTF-8 JSON without NaN, infinities or repeated names;
and every column's type and length: deltas whole numbers >= 0, the first 0, adding up to the span;
names as readings allow them; measures ints or finite floats (never booleans), at least one a
reading; event ids strings an event id may be; dimension values strings a dimension value may be;
the readings in strictly ascending (time, event id) order.

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
import itertools
import json
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from .errors import KeyDesignError
from .items import item_size, write_units
from .model import (
    CONTROL_CHARACTERS,
    DIMENSION_VALUE_MAX,
    ENTITY_ID_MAX,
    EVENT_ID_MAX,
    ID_PATTERN,
    NAME_PATTERN,
    Reading,
    derive_event_id,
)
from .timefmt import MAX_TS_MS
from .varints import VarintError, read_varint, write_varint

#: The format this code writes (the payload's first byte). It reads it and the two before it.
FORMAT = 3
#: The format of a write-tier group item (:mod:`keydesign.writetier`): format 3's header, and a body
#: that holds the readings of many entities. Only :func:`decode_group` reads it.
FORMAT_GROUP = 4
#: The format of a compacted cluster block (:mod:`keydesign.writetier`): format 3's header, and a body
#: of a section per entity (:func:`encode_cluster`), so a reader of one entity parses its own section
#: only. :func:`decode_group` reads it too.
FORMAT_CLUSTER = 5
#: Formats 1 and 2 (read, no longer written): the first byte said how the body was stored.
FORMAT_1_DEFLATED = 1
FORMAT_2_RAW = 2
#: Format 3's codec byte.
CODEC_DEFLATE = 0
CODEC_RAW = 1
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
_CHECKSUM_BYTES = 4


class BlockError(KeyDesignError):
    """A stored block that cannot be decoded (corrupt, truncated, or a format this code does not know)."""


class BlockHeader(NamedTuple):
    """The uncompressed head of a payload: enough to decide whether to decode the body.

    ``format_version`` is the payload's format (1, 2 or 3), ``deflated`` whether its body is DEFLATE.
    A named tuple: every block read builds one, and a frozen dataclass's ``__init__`` costs a one-reading
    block's header as much again as reading it.
    """

    count: int  # type: ignore[assignment]  # the readings it counts, in place of tuple.count
    first_ms: int
    span_ms: int
    version: int
    body_at: int
    format_version: int = FORMAT
    deflated: bool = True

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


# -- encoding -------------------------------------------------------------------------------

_Cells = tuple[list[int], list[Any]]


def _column(cells: _Cells, count: int) -> list[Any] | dict[str, list[Any]]:
    """A name's column: dense (one entry a reading) when at least half the readings have it, else sparse."""
    indexes, values = cells
    if len(values) == count:
        return values
    if 2 * len(values) < count:
        return {"i": indexes, "v": values}
    dense: list[Any] = [None] * count
    for index, value in zip(indexes, values, strict=True):
        dense[index] = value
    return dense


def _add_cells(columns: dict[str, _Cells], index: int, values: Mapping[str, Any]) -> None:
    for name, value in values.items():
        cells = columns.get(name)
        if cells is None:
            cells = columns[name] = ([], [])
        cells[0].append(index)
        cells[1].append(value)


def body_estimate(reading: Reading) -> int:
    """About the bytes ``reading`` adds to an uncompressed body (names aside: a block writes each once),
    computed without encoding it: :meth:`keydesign.Layout.pack` cuts runs of readings by it."""
    size = 16 + len(reading.event_id) + 24 * len(reading.measures)
    if reading.dimensions:
        size += 8 * len(reading.dimensions) + sum(map(len, reading.dimensions.values()))
    return size


#: The most body (by :func:`body_estimate`) one run of readings is encoded with before it is cut in
#: two while its block is over MAX_BLOCK_ITEM_BYTES: 16 times what fits in a block uncompressed, so a
#: run is halved a few times at most, and packing costs a bounded number of encodings of each reading
#: however its readings compress.
MAX_RUN_BODY_BYTES = 16 * MAX_BLOCK_ITEM_BYTES


def cut_runs(
    members: Sequence[tuple[int, Any, int]], estimates: Sequence[int], *, span_limit_ms: int = MAX_BLOCK_SPAN_MS
) -> list[list[int]]:
    """Members (time, tie-break, index; sorted) cut into runs an item may hold: each run within
    ``span_limit_ms`` of its first reading, at most MAX_BLOCK_READINGS long, and of at most
    :data:`MAX_RUN_BODY_BYTES` of body by the readings' ``estimates`` (:func:`body_estimate`).
    Blocks (:meth:`keydesign.Layout.pack`), group items and compacted blocks (:mod:`keydesign.writetier`)
    are cut by it."""
    runs: list[list[int]] = []
    run: list[int] = []
    first = size = 0
    for (ts, _, index), estimate in zip(members, estimates, strict=True):
        if run and (
            ts - first >= span_limit_ms or len(run) == MAX_BLOCK_READINGS or size + estimate > MAX_RUN_BODY_BYTES
        ):
            runs.append(run)
            run = []
        if not run:
            first, size = ts, 0
        run.append(index)
        size += estimate
    runs.append(run)
    return runs


def encode_block(readings: Sequence[Reading], version: int, *, span_limit_ms: int = MAX_BLOCK_SPAN_MS) -> Encoded:
    """The payload of a block holding ``readings`` (one entity, sorted by time then event id,
    no two with the same time and event id, within ``span_limit_ms`` and the count limit) published
    as ``version``. A compacted block (:mod:`keydesign.writetier`) is one with a longer span limit.

    Linear in the readings' size: a name few readings have is a sparse column, not one padded to the
    block's length.
    """
    if readings and any(r.entity_id != readings[0].entity_id for r in readings):
        raise ValueError("a block's readings are one entity's, in ascending (time, event id) order, each once")
    return _encode(readings, version, span_limit_ms, grouped=False)


def encode_group(readings: Sequence[Reading], version: int, *, span_limit_ms: int = MAX_BLOCK_SPAN_MS) -> Encoded:
    """The payload of a write-tier group item (format 4): ``readings`` of any entities, sorted by
    (time, entity, event id), each once, within ``span_limit_ms`` and the count limit. A sub-item
    (:mod:`keydesign.writetier`, a re-packed slice of a sub-group) is one with a longer span limit."""
    return _encode(readings, version, span_limit_ms, grouped=True)


def encode_cluster(readings: Sequence[Reading], version: int, *, span_limit_ms: int = MAX_BLOCK_SPAN_MS) -> Encoded:
    """The payload of a compacted cluster block (format 5): ``readings`` of any entities, sorted by (time,
    entity, event id), each once, within ``span_limit_ms`` and the count limit.

    Its body is the JSON array ``[entities, lengths]`` and then, with nothing between them, a section per
    entity in the order named, ``lengths`` characters long each: the entity's readings' columns as a
    block's body (format 3), its first time delta from the block's first reading. A reader of one entity
    parses the array and its own section, not the other entities' readings."""
    _limits(readings, span_limit_ms)
    keys = [(r.ts_ms, r.entity_id, r.event_id) for r in readings]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        raise ValueError("a cluster's readings are in ascending (time, entity, event id) order, each once")
    by_entity: dict[str, list[Reading]] = {}
    for reading in readings:
        by_entity.setdefault(reading.entity_id, []).append(reading)
    first = readings[0].ts_ms
    sections = [_json(_columns(own, first, grouped=False)) for own in by_entity.values()]
    body = (_json([list(by_entity), list(map(len, sections))]) + "".join(sections)).encode("utf-8")
    payload = _seal(FORMAT_CLUSTER, body, (len(readings), first, readings[-1].ts_ms - first), version)
    digest = hashlib.sha256(f"\x00cluster\n{version}\n".encode() + body).hexdigest()[:BLOCK_ID_DIGITS]
    return Encoded(payload, digest, first, readings[-1].ts_ms)


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _limits(readings: Sequence[Reading], span_limit_ms: int) -> None:
    if not readings:
        raise ValueError("a block holds at least one reading")
    if len(readings) > MAX_BLOCK_READINGS:
        raise ValueError(f"a block holds at most {MAX_BLOCK_READINGS} readings, not {len(readings)}")
    if readings[-1].ts_ms - readings[0].ts_ms >= span_limit_ms:
        raise ValueError(f"a block's readings lie within {span_limit_ms} ms of its first one")


def _encode(readings: Sequence[Reading], version: int, span_limit_ms: int, *, grouped: bool) -> Encoded:
    _limits(readings, span_limit_ms)
    first = readings[0].ts_ms
    body = _json(_columns(readings, first, grouped=grouped)).encode("utf-8")
    last = readings[-1].ts_ms
    payload = _seal(FORMAT_GROUP if grouped else FORMAT, body, (len(readings), first, last - first), version)
    owner = "\x00group" if grouped else readings[0].entity_id
    digest = hashlib.sha256(f"{owner}\n{version}\n".encode() + body).hexdigest()[:BLOCK_ID_DIGITS]
    return Encoded(payload, digest, first, last)


def _columns(readings: Sequence[Reading], first: int, *, grouped: bool) -> list[object]:
    """The body's columns of ``readings`` (grouped: with the entities and the entity column first), the
    first time delta from ``first``; ValueError when they are out of order."""
    deltas: list[int] = []
    ids: list[str | None] = []
    entities: dict[str, int] = {}
    entity_of: list[int] = []
    measures: dict[str, _Cells] = {}
    dimensions: dict[str, _Cells] = {}
    previous: tuple[int, str, str] | None = None
    stored_ids = False
    for index, reading in enumerate(readings):
        key = (reading.ts_ms, reading.entity_id if grouped else "", reading.event_id)
        if previous is not None and key <= previous:
            raise ValueError(
                "a group's readings are in ascending (time, entity, event id) order, each once"
                if grouped
                else "a block's readings are one entity's, in ascending (time, event id) order, each once"
            )
        deltas.append(reading.ts_ms - (first if previous is None else previous[0]))
        previous = key
        if grouped:
            entity_of.append(entities.setdefault(reading.entity_id, len(entities)))
        if reading.derived_id:
            ids.append(None)
        else:
            ids.append(reading.event_id)
            stored_ids = True
        _add_cells(measures, index, reading.measures)
        if reading.dimensions:
            _add_cells(dimensions, index, reading.dimensions)
    count = len(readings)
    columns: list[object] = [
        deltas,
        {name: _column(measures[name], count) for name in sorted(measures)},
        ids if stored_ids else None,
        {name: _column(dimensions[name], count) for name in sorted(dimensions)} if dimensions else None,
    ]
    while columns[-1] is None:
        columns.pop()
    if grouped:
        columns[:0] = [list(entities), entity_of]
    return columns


def _seal(format_version: int, body: bytes, counts: tuple[int, int, int], version: int) -> bytes:
    """The payload: the header (format, codec, count, first ms, span, version), the checksum, the body."""
    packer = zlib.compressobj(_LEVEL, zlib.DEFLATED, -15)
    deflated = packer.compress(body) + packer.flush()
    codec = CODEC_DEFLATE if len(deflated) < len(body) else CODEC_RAW
    head = bytearray([format_version, codec])
    for number in counts:
        write_varint(number, head)
    version_bytes = version.to_bytes(max(1, (version.bit_length() + 7) // 8), "big")
    head.append(len(version_bytes))
    head += version_bytes
    stored = deflated if codec == CODEC_DEFLATE else body
    checksum = zlib.crc32(stored, zlib.crc32(head))
    return bytes(head) + checksum.to_bytes(_CHECKSUM_BYTES, "big") + stored


# -- decoding -------------------------------------------------------------------------------


#: A header built as the tuple it is: a named tuple's own ``__new__`` is Python code.
_new_header = tuple.__new__


def read_header(payload: bytes, *, span_limit_ms: int = MAX_BLOCK_SPAN_MS, group: bool = False) -> BlockHeader:
    """The header of ``payload``, its checksum verified (formats 3 and 4); raises :class:`BlockError`
    when it is not a block this code reads: a block (formats 1 to 3) whose readings lie within
    ``span_limit_ms``, or with ``group``, a write-tier group item or a cluster block (format 4 or 5)."""
    if not payload:
        raise BlockError("b", "the payload is empty")
    format_version = payload[0]
    if (format_version in (FORMAT_GROUP, FORMAT_CLUSTER)) != group:
        wanted = "a group item or cluster block (format 4 or 5)" if group else "a block (format 1, 2 or 3)"
        raise BlockError("b", f"the payload's format is {format_version}, not {wanted}")
    if format_version in (FORMAT, FORMAT_GROUP, FORMAT_CLUSTER):
        if len(payload) < 2:
            raise BlockError("b", "the payload ends inside its header")
        codec, pos = payload[1], 2
    elif format_version in (FORMAT_1_DEFLATED, FORMAT_2_RAW):
        codec, pos = (CODEC_DEFLATE if format_version == FORMAT_1_DEFLATED else CODEC_RAW), 1
    else:
        newer = " (a newer writer's?)" if format_version > FORMAT_CLUSTER else ""
        raise BlockError("b", f"block format {format_version} is not one this code reads (1 to 5){newer}")
    size = len(payload)
    try:
        # The count and the span are one byte in most blocks: read inline, anything longer as a varint.
        count, pos = (payload[pos], pos + 1) if pos < size and payload[pos] < 0x80 else read_varint(payload, pos)
        first, pos = read_varint(payload, pos)
        span, pos = (payload[pos], pos + 1) if pos < size and payload[pos] < 0x80 else read_varint(payload, pos)
    except VarintError as exc:
        if exc.truncated:
            raise BlockError("b", "the payload ends inside its header") from None
        raise BlockError("b", "a header number is longer than any this format writes") from None
    if pos >= size:
        raise BlockError("b", "the payload ends inside its header")
    at, pos = pos + 1, pos + 1 + payload[pos]
    if pos > size:
        raise BlockError("b", "the payload ends inside its header")
    version = int.from_bytes(payload[at:pos], "big")
    if format_version >= FORMAT:  # formats 3 to 5 (any later one is refused above)
        if pos + _CHECKSUM_BYTES > size:
            raise BlockError("b", "the payload ends inside its header")
        stored = int.from_bytes(payload[pos : pos + _CHECKSUM_BYTES], "big")
        view = memoryview(payload)
        if zlib.crc32(view[pos + _CHECKSUM_BYTES :], zlib.crc32(view[:pos])) != stored:
            raise BlockError("b", "the checksum does not match: the payload is corrupt or cut short")
        pos += _CHECKSUM_BYTES
        if codec not in (CODEC_DEFLATE, CODEC_RAW):
            raise BlockError("b", f"codec {codec} is not one format {format_version} has")
    if not 1 <= count <= MAX_BLOCK_READINGS:
        raise BlockError("b", f"the header counts {count} readings; a block holds 1 to {MAX_BLOCK_READINGS}")
    if span >= span_limit_ms:
        raise BlockError("b", f"the header's span is {span} ms; a block's readings lie within {span_limit_ms} ms")
    if first + span > MAX_TS_MS:
        raise BlockError("b", "the header's times are past 9999")
    return _new_header(BlockHeader, (count, first, span, version, pos, format_version, codec == CODEC_DEFLATE))


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not a number a block holds")


def _unique_names(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        raise ValueError("an object names one key twice")
    return found


#: One decoder for every body: ``json.loads`` with these options builds a new decoder (and its
#: scanner) on each call, which costs a block of one reading as much as parsing it.
_BODY_DECODER = json.JSONDecoder(parse_constant=_refuse_constant, object_pairs_hook=_unique_names)


def _body(payload: bytes, header: BlockHeader) -> object:
    return _parse(_text(payload, header))


def _text(payload: bytes, header: BlockHeader) -> str:
    raw = memoryview(payload)[header.body_at :]
    if header.deflated:
        inflater = zlib.decompressobj(-15)
        try:
            text = inflater.decompress(raw)
        except zlib.error as exc:
            raise BlockError("b", f"the body does not decompress ({exc})") from None
        if not inflater.eof:
            raise BlockError("b", "the body does not decompress: its DEFLATE stream is cut short")
        if inflater.unused_data:
            raise BlockError("b", "the body does not decompress: bytes follow its DEFLATE stream")
    else:
        text = bytes(raw)
    try:
        return text.decode("utf-8")
    except ValueError as exc:
        raise BlockError("b", f"the body is not UTF-8 JSON ({str(exc)[:200]})") from None


def _parse(body: str, what: str = "the body") -> object:
    try:
        # A body is the JSON alone, which raw_decode parses without decode's white-space scans; anything
        # else is decoded again by decode, which accepts white space around it and names what is wrong.
        try:
            found, end = _BODY_DECODER.raw_decode(body)
        except ValueError:
            end = -1
        return found if end == len(body) else _BODY_DECODER.decode(body)
    except (ValueError, RecursionError) as exc:
        raise BlockError("b", f"{what} is not UTF-8 JSON ({str(exc)[:200]})") from None


def _times(deltas: object, header: BlockHeader, section: bool = False) -> list[int]:
    """The readings' times; a cluster block's ``section`` (of any count up to the header's) starts at its
    first delta from the block's first reading and ends within the block's span."""
    if section:
        if type(deltas) is not list or not 1 <= len(deltas) <= header.count:
            raise BlockError("b", f"a section's time deltas are not a list of 1 to the {header.count} readings")
        if set(map(type, deltas)) != {int}:
            raise BlockError("b", "a time delta is not a whole number")
        if min(deltas) < 0 or sum(deltas) > header.span_ms:
            raise BlockError("b", "a section's time deltas are not non-negative within the header's span")
        return list(itertools.accumulate(deltas, initial=header.first_ms))[1:]
    if type(deltas) is not list or len(deltas) != header.count:
        raise BlockError("b", f"the time deltas are not a list of the {header.count} readings the header counts")
    if set(map(type, deltas)) != {int}:
        raise BlockError("b", "a time delta is not a whole number")
    if deltas[0] != 0 or min(deltas) < 0:
        raise BlockError("b", "the time deltas are not 0 and then non-negative: the readings are not in time order")
    if sum(deltas) != header.span_ms:
        raise BlockError("b", "the readings' times do not end where the header says")
    return list(itertools.accumulate(deltas[1:], initial=header.first_ms))  # the first delta is 0


def _numbers(values: list[Any]) -> str | None:
    """What is wrong with a column's measure values (None: nothing)."""
    kinds = set(map(type, values))
    if not kinds <= {int, float}:
        shown = sorted(k.__name__ for k in kinds - {int, float})
        return f"holds {', '.join(shown)}, not only numbers"
    try:
        finite = all(map(math.isfinite, values))
    except OverflowError:
        finite = False
    return None if finite else "holds a number that is not finite (or past a double's range)"


def _texts(values: list[Any]) -> str | None:
    """What is wrong with a column's dimension values (None: nothing)."""
    if set(map(type, values)) != {str}:
        return "holds a value that is not a string"
    if max(map(len, values)) > DIMENSION_VALUE_MAX:
        return f"holds a value longer than {DIMENSION_VALUE_MAX} characters"
    joined = "".join(values)
    if CONTROL_CHARACTERS.search(joined):
        return "holds a control character"
    if not joined.isascii():
        try:
            joined.encode("utf-8")
        except UnicodeEncodeError:
            return "holds a lone surrogate"
    return None


#: The cells of a block's readings, a name-to-value dict each: a list of every reading's, or a dict of
#: the wanted readings' by their row.
_Rows = list[dict[str, Any]] | dict[int, dict[str, Any]]


def _rows(count: int, wanted: Sequence[int] | None) -> _Rows:
    return [{} for _ in range(count)] if wanted is None else {row: {} for row in wanted}


def _fill(
    rows: _Rows,
    count: int,
    what: str,
    columns: object,
    check: Callable[[list[Any]], str | None],
    *,
    sparse: bool,
) -> None:
    """Put each column of ``columns`` (an object of name to column, of ``count`` readings) into the
    readings' ``rows`` (every reading's, or the wanted ones': every column is checked whole)."""
    if type(columns) is not dict:
        raise BlockError("b", f"the {what}s are not an object of name to column")
    for name, column in columns.items():
        if NAME_PATTERN.match(name) is None:
            raise BlockError("b", f"the {what} name {name[:80]!r} is not one a reading may have")
        if type(column) is list:
            if len(column) != count:
                raise BlockError("b", f"the {what} {name!r} does not hold the {count} readings the header counts")
            if None in column:
                indexes: Sequence[int] = [i for i, value in enumerate(column) if value is not None]
                values = [column[i] for i in indexes]
            else:
                indexes, values = range(count), column
        elif sparse and type(column) is dict and column.keys() == {"i", "v"}:
            indexes, values = column["i"], column["v"]
            if type(indexes) is not list or type(values) is not list or len(indexes) != len(values):
                raise BlockError("b", f"the sparse {what} {name!r} is not two lists of the same length")
            if set(map(type, indexes)) - {int} or any(a >= b for a, b in itertools.pairwise(indexes)):
                raise BlockError("b", f"the sparse {what} {name!r} has indexes that are not whole numbers ascending")
            if indexes and (indexes[0] < 0 or indexes[-1] >= count):
                raise BlockError("b", f"the sparse {what} {name!r} has an index outside the {count} readings")
            if any(value is None for value in values):
                raise BlockError("b", f"the sparse {what} {name!r} holds a null")
        else:
            raise BlockError("b", f"the {what} {name!r} is not a column")
        if not values:
            continue  # no writer makes an empty column, but it decodes to nothing
        problem = check(values)
        if problem is not None:
            raise BlockError("b", f"the {what} {name!r} {problem}")
        if isinstance(rows, list):
            for index, value in zip(indexes, values, strict=True):
                rows[index][name] = value
        elif type(indexes) is range:
            for index, cells in rows.items():
                cells[name] = values[index]
        else:
            for index, value in zip(indexes, values, strict=True):
                if index in rows:
                    rows[index][name] = value


def _event_ids(ids: object, count: int) -> list[str | None] | None:
    if ids is None:
        return None
    if type(ids) is not list or len(ids) != count:
        raise BlockError("b", f"the event ids are not a list of the {count} readings the header counts")
    stored = [event_id for event_id in ids if event_id is not None]
    # Joined, valid ids are one valid id but for its length: one match checks them all.
    if stored and (
        set(map(type, stored)) != {str}
        or not all(stored)
        or max(map(len, stored)) > EVENT_ID_MAX
        or ID_PATTERN.match("".join(stored)) is None
    ):
        bad = next(i for i in stored if type(i) is not str or not i or len(i) > EVENT_ID_MAX or not ID_PATTERN.match(i))
        raise BlockError("b", f"the event id {str(bad)[:80]!r} is not one a reading may have")
    return ids


def decode_block(
    entity_id: str, payload: bytes, *, span_limit_ms: int = MAX_BLOCK_SPAN_MS
) -> tuple[BlockHeader, list[Reading]]:
    """The header and the readings of a block of ``entity_id``, in stored order (time, then event id).

    Raises :class:`BlockError` naming what is wrong when the payload is not a whole,
    well-formed block (see the module's description for every check) whose readings lie within
    ``span_limit_ms`` (longer for a compacted block, :mod:`keydesign.writetier`).
    """
    header = read_header(payload, span_limit_ms=span_limit_ms)
    body = _body(payload, header)
    if type(body) is not list or not 2 <= len(body) <= 4:
        raise BlockError("b", "the body is not the columns of a block")
    return header, _readings(header, [entity_id] * header.count, body)


def decode_group(
    payload: bytes, entity_id: str | None = None, *, span_limit_ms: int = MAX_BLOCK_SPAN_MS
) -> tuple[BlockHeader, list[Reading]]:
    """The header and the readings of a write-tier group item, in stored order (time, entity,
    event id); :class:`BlockError` as :func:`decode_block`, and for an entity column that is not
    valid entity ids, each reading's an index into them.

    With ``entity_id``, only that entity's readings: the checksum and the header are checked as
    always, and every column's type and length when the item lists the entity, but the readings
    (their derived event ids are most of the work) and the checks of one reading (a measure, the
    order) are made for its rows alone, and an item that does not list it is read no further than
    its list of entities. A reader of
    one device in a group's hour skips the other devices' readings; compaction, which reads every
    reading, checks every item whole. ``span_limit_ms``: as :func:`decode_block`'s (a sub-item's is
    longer)."""
    header = read_header(payload, span_limit_ms=span_limit_ms, group=True)
    if header.format_version == FORMAT_CLUSTER:
        return header, _cluster_readings(header, _text(payload, header), entity_id)
    body = _body(payload, header)
    if type(body) is not list or not 4 <= len(body) <= 6:
        raise BlockError("b", "the body is not the columns of a group item")
    names, index = body[0], body[1]
    if not _entities(names, entity_id):
        return header, []
    if type(index) is not list or len(index) != header.count or set(map(type, index)) != {int}:
        raise BlockError("b", f"the entity column is not a list of the {header.count} readings' indexes")
    if min(index) < 0 or max(index) >= len(names):
        raise BlockError("b", "the entity column names an entity the item does not list")
    if entity_id is None:
        return header, _readings(header, [names[i] for i in index], body[2:])
    rows = list(itertools.compress(range(header.count), map(names.index(entity_id).__eq__, index)))
    return header, _readings(header, [entity_id] * header.count, body[2:], rows)


def _entities(names: object, entity_id: str | None) -> bool:
    """Whether a group item's or cluster block's list of entities holds ``entity_id`` (None: any), the list
    checked: distinct valid entity ids (all of them, unless it does not hold ``entity_id``)."""
    if type(names) is not list or not names or set(map(type, names)) != {str} or len(set(names)) != len(names):
        raise BlockError("b", "the entities are not a list of distinct strings")
    if entity_id is not None and entity_id not in names:
        return False
    # Joined, valid ids are one valid id but for its length: one match checks them all.
    if not all(names) or max(map(len, names)) > ENTITY_ID_MAX or ID_PATTERN.match("".join(names)) is None:
        bad = next(n for n in names if not n or len(n) > ENTITY_ID_MAX or ID_PATTERN.match(n) is None)
        raise BlockError("b", f"the entity {bad[:80]!r} is not an entity id")
    return True


def _cluster_readings(header: BlockHeader, text: str, entity_id: str | None) -> list[Reading]:
    """The readings of a cluster block's body (:func:`encode_cluster`): ``entity_id``'s, parsing its section
    alone, or every entity's, in (time, entity, event id) order, checked as a group item's are."""
    try:
        head, at = _BODY_DECODER.raw_decode(text)
    except (ValueError, RecursionError) as exc:
        raise BlockError("b", f"the body is not UTF-8 JSON ({str(exc)[:200]})") from None
    if type(head) is not list or len(head) != 2:
        raise BlockError("b", "the body does not start with its entities and their sections' lengths")
    names, lengths = head
    if not _entities(names, entity_id):
        return []
    if type(lengths) is not list or len(lengths) != len(names) or set(map(type, lengths)) != {int}:
        raise BlockError("b", "the sections' lengths are not a whole number an entity")
    if min(lengths) < 1 or at + sum(lengths) != len(text):
        raise BlockError("b", "the sections do not fill the body after its entities")
    starts = list(itertools.accumulate(lengths, initial=at))
    wanted = range(len(names)) if entity_id is None else (names.index(entity_id),)
    out: list[Reading] = []
    for i in wanted:
        section = _parse(text[starts[i] : starts[i + 1]], f"the section of {names[i]!r}")
        if type(section) is not list or not 2 <= len(section) <= 4:
            raise BlockError("b", f"the section of {names[i]!r} is not the columns of a block")
        out += _readings(header, names[i], section)
    if entity_id is not None:
        return out
    if (
        len(out) != header.count
        or min(r.ts_ms for r in out) != header.first_ms
        or max(r.ts_ms for r in out) != header.last_ms
    ):
        raise BlockError("b", "the sections do not hold the readings, first and last, the header counts")
    out.sort(key=lambda r: (r.ts_ms, r.entity_id, r.event_id))
    return out


def _readings(
    header: BlockHeader, entities: list[str] | str, body: list[Any], rows: Sequence[int] | None = None
) -> list[Reading]:
    """The readings of a decoded body's columns (deltas, measures, event ids, dimensions), the
    i-th of entity ``entities[i]``, checked as the module's description says; with ``rows``, those
    readings only (every column is checked whole; their order among themselves). Only those rows'
    cells are taken out of the columns: a reader of one entity in a cluster block builds no other's.
    With one entity (a string), a cluster block's section: as many readings as its deltas, all its."""
    deltas, measures, ids, dimensions = [*body, None, None][:4]
    times = _times(deltas, header, section=isinstance(entities, str))
    count = len(times)
    if isinstance(entities, str):
        entities = [entities] * count
    sparse = header.format_version >= FORMAT
    measure_rows = _rows(count, rows)
    _fill(measure_rows, count, "measure", measures, _numbers, sparse=sparse)
    dimension_rows: _Rows | None = None
    if dimensions is not None:
        dimension_rows = _rows(count, rows)
        _fill(dimension_rows, count, "dimension", dimensions, _texts, sparse=sparse)
    event_ids = _event_ids(ids, count)
    out: list[Reading] = []
    previous: tuple[int, str, str] | None = None
    for index in range(count) if rows is None else rows:
        ts = times[index]
        reading_measures = measure_rows[index]
        if not reading_measures:
            raise BlockError("b", f"reading {index} of the block has no measure")
        reading_dimensions = dimension_rows[index] if dimension_rows is not None else {}
        entity_id = entities[index]
        event_id = event_ids[index] if event_ids is not None else None
        if event_id is None:
            event_id = derive_event_id(entity_id, ts, reading_measures, reading_dimensions)
        key = (ts, entity_id, event_id)
        if previous is not None and key <= previous:
            order = "(time, entity, event id)" if header.format_version == FORMAT_GROUP else "(time, event id)"
            raise BlockError("b", f"the readings are not in ascending {order} order, each once")
        previous = key
        out.append(Reading(entity_id, event_id, ts, reading_measures, reading_dimensions))
    return out


# -- the item -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ItemKey:
    """Where one block (or write-tier group item) is stored."""

    table: str
    pk: str
    sk: str


@dataclass(frozen=True, slots=True)
class EncodedItem:
    """An item ready to write, a block (:class:`keydesign.Block`) or a write-tier group item
    (:class:`keydesign.writetier.GroupItem`): where it is stored, its readings and the entries they
    came from, its encoded payload, size and the write units a put of :meth:`item` is billed, and
    its expiry (epoch seconds; None: none)."""

    key: ItemKey
    readings: tuple[Reading, ...]
    origins: tuple[int, ...]
    encoded: Encoded
    size: int
    write_units: int
    ttl: int | None

    @property
    def first_ms(self) -> int:
        return self.encoded.first_ms

    @property
    def last_ms(self) -> int:
        return self.encoded.last_ms

    def item(self) -> dict[str, object]:
        """The item in plain Python values (the payload as bytes)."""
        return block_item(self.key.pk, self.key.sk, self.encoded.payload, self.ttl)


def last_copies(entries: Sequence[tuple[Reading, Any]]) -> tuple[dict[tuple[str, int, str], int], dict[int, list[int]]]:
    """Of entries (reading, version) in arrival order, the last copy of each reading (its identity,
    entity, time and event id -> its index), and for each winning index the earlier copies it replaced."""
    winners: dict[tuple[str, int, str], int] = {}
    replaced: dict[int, list[int]] = {}
    for index, (reading, _) in enumerate(entries):
        identity = (reading.entity_id, reading.ts_ms, reading.event_id)
        earlier = winners.get(identity)
        if earlier is not None:
            replaced[index] = [*replaced.pop(earlier, ()), earlier]
        winners[identity] = index
    return winners, replaced


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
