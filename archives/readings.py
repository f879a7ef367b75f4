"""The readings of an export: its blocks decoded, each reading once (the newest copy), in bounded memory.

A reading can be stored in several blocks (a regrouped redelivery, a correction); the copy in
the block of the highest version wins (:mod:`keydesign.blocks`). Its copies can lie in any
data file (a split entity's or a random layout's blocks are in several partitions), so the
export is shuffled through local spill files first:

1. every block of the selection is appended to a spill file, once for each 10-second window
   (:data:`WINDOW_MS`, the longest span of a block) its readings touch: at most two. A
   reading's copies all start within a block span before it, so every one of them reaches
   the spill record of (its entity, its window);
2. a spill file whose blocks hold more than ``max_readings`` readings is split by
   (entity, window) into :data:`FANOUT` files, again while one is too large;
3. a spill file small enough is decoded whole; of each (entity, window) only the readings
   of that window are kept, each identity once, the highest version's.

So memory holds one spill file's readings: at most ``max_readings``, unless a single
(entity, 10-second window) alone holds more. The spill files hold the selected blocks,
still compressed (about the size of the export's data, uncompressed).

The write tier's items (``keydesign.writetier``) are read as readings too: a group item (many
entities' readings) is decoded as it is routed and spilled as a block of each of its entities
(the selection's), a compacted block (an hour's span) as a block of each 10-second window it
holds, each of the item's version, so their copies dedupe with the blocks' as any two blocks'
do. A dense mark (no readings) is skipped.

A block that does not decode (:class:`keydesign.BlockError`: a failed checksum, a malformed
column) raises :class:`archives.export.CorruptItem` naming its file, line and key, or, given
``on_corrupt_block``, is handed to it as one, counted in ``ReadStats.corrupt_blocks`` and left
out: the rest of the export is read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from archives.export import CorruptItem, DataFile, Store, find_exports, items
from keydesign import BlockError, Reading, decode_block
from keydesign.blocks import (
    MAX_BLOCK_SPAN_MS,
    BlockHeader,
    decode_group,
    encode_block,
    keep_newest,
    newest_wins,
    read_header,
)
from keydesign.layouts import KeyParts, parse_keys
from keydesign.legacy import is_legacy, legacy_block
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    COMPACTED_PK_SUFFIX,
    DENSE_MARK_PREFIX,
    GROUP_PK_PREFIX,
    MAX_COMPACTED_SPAN_MS,
    STATE_PK,
    SUB_PK_PREFIX,
)

WINDOW_MS = MAX_BLOCK_SPAN_MS
FANOUT = 64
#: Splits of one spill file at most; past it, a spill file is decoded whatever its size.
MAX_DEPTH = 4
DEFAULT_MAX_READINGS = 500_000
#: Told of each block that does not decode, when a read goes on without it.
_Report = Callable[[CorruptItem], None]


@dataclass(frozen=True, slots=True)
class Selection:
    """Which readings to return: some entities (None: all) and a half-open time range."""

    entities: frozenset[str] | None = None
    from_ms: int | None = None
    to_ms: int | None = None

    def takes_entity(self, entity: str) -> bool:
        return self.entities is None or entity in self.entities

    def overlaps(self, first_ms: int, last_ms: int) -> bool:
        return (self.from_ms is None or last_ms >= self.from_ms) and (self.to_ms is None or first_ms < self.to_ms)

    def takes(self, ts_ms: int) -> bool:
        return (self.from_ms is None or ts_ms >= self.from_ms) and (self.to_ms is None or ts_ms < self.to_ms)


@dataclass(slots=True)
class ReadStats:
    """What one read did; ``held_max`` is the most readings decoded in memory at once."""

    exports: int = 0
    data_files: int = 0
    items: int = 0
    blocks: int = 0
    copies: int = 0
    readings: int = 0
    held_max: int = 0
    spill_files: int = 0
    incomplete: tuple[str, ...] = ()
    corrupt_blocks: int = 0

    @property
    def duplicates(self) -> int:
        """Copies of a reading dropped because a newer (or identical) copy was kept."""
        return self.copies - self.readings


def read_readings(
    store: Store,
    selection: Selection = Selection(),
    *,
    max_readings: int = DEFAULT_MAX_READINGS,
    without_manifest: bool = False,
    work_dir: Path | None = None,
    stats: ReadStats | None = None,
    on_corrupt_block: _Report | None = None,
) -> Iterator[Reading]:
    """Every reading of the export(s) under ``store`` that ``selection`` takes, once each (the copy of
    the highest version), sorted by (entity, time, event id) within each spill file (the whole output
    when it fits in ``max_readings``). Raises :class:`archives.export.ArchiveError` naming the file
    and line of anything it cannot read; a block that does not decode goes to ``on_corrupt_block``
    instead, when given, and the read goes on without it."""
    stats = stats if stats is not None else ReadStats()
    found = find_exports(store, without_manifest=without_manifest)
    stats.exports, stats.incomplete = len(found.exports), found.incomplete
    sources: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tsctl-archive-", dir=work_dir) as scratch:
        spill = _Spill(Path(scratch) / "0")
        for export in found.exports:
            for data in export:
                sources.append(store.where + data.key)
                stats.data_files += 1
                _route(
                    store,
                    data,
                    source=len(sources) - 1,
                    selection=selection,
                    spill=spill,
                    stats=stats,
                    report=on_corrupt_block,
                )
        spill.close()
        drained = _Drain(sources, selection, max_readings, stats, on_corrupt_block)
        yield from drained.drain(spill, depth=0)


# -- pass 1: the export's blocks into a spill file -------------------------------------------------


class _Spill:
    """An append-only file of spill records, and the readings its blocks hold."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.readings = 0
        self.records = 0
        self._out: IO[str] = path.open("w", encoding="utf-8")

    def add(self, record: list[Any], readings: int) -> None:
        self._out.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.readings += readings
        self.records += 1

    def close(self) -> None:
        self._out.close()

    def records_in(self) -> Iterator[list[Any]]:
        with self.path.open(encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)


def _corrupt(where: str, line: int, reason: str, *, stats: ReadStats, report: _Report | None) -> None:
    """A block that does not decode: raised, or reported and counted when the caller reads past them."""
    error = CorruptItem(where, line, reason)
    if report is None:
        raise error
    stats.corrupt_blocks += 1
    report(error)


def _route(
    store: Store,
    data: DataFile,
    *,
    source: int,
    selection: Selection,
    spill: _Spill,
    stats: ReadStats,
    report: _Report | None,
) -> None:
    where = store.where + data.key
    for line, item in items(store, data):
        stats.items += 1
        key = f"pk {_text(item, 'pk')!r} sk {_text(item, 'sk')!r}"
        try:
            blocks = _tier_blocks(item, where, line, selection) if _in_write_tier(item) else [_block(item, where, line)]
        except _UnreadableError as exc:
            _corrupt(where, line, f"block of {exc.entity}, {key}: {exc.reason}", stats=stats, report=report)
            continue
        counted = False
        for entity, header, stored in blocks:
            if not selection.takes_entity(entity) or not selection.overlaps(header.first_ms, header.last_ms):
                continue
            stats.blocks += not counted
            counted = True
            for window in range(header.first_ms // WINDOW_MS, header.last_ms // WINDOW_MS + 1):
                spill.add([entity, window, header.count, stored, source, line, key], header.count)


def _block(item: Mapping[str, Any], where: str, line: int) -> tuple[str, BlockHeader, str | Mapping[str, Any]]:
    """``(entity, header, what the spill keeps)`` of an exported item: of a block, its payload as
    base64; of an item of the format before blocks (one reading), the item itself. Raises
    :class:`_UnreadableError` for a block or item whose keys are right but whose content is not."""
    pk, sk = _text(item, "pk"), _text(item, "sk")
    if pk is None or sk is None:
        raise CorruptItem(where, line, "no string pk and sk: not an item of a readings table")
    if is_legacy(item):
        try:
            header, reading = legacy_block(item)
        except BlockError as exc:
            raise _UnreadableError(_text(item, "e") or pk, exc.reason) from None
        return reading.entity_id, header, item
    parts: KeyParts | None = parse_keys(pk, sk, "hybrid") or parse_keys(pk, sk, "random")
    if parts is None:
        raise CorruptItem(where, line, f"pk {pk!r}, sk {sk!r} are not a block's keys")
    encoded, payload = _payload(item, where, line, f"the item of {parts.entity}", f"the block of {parts.entity}")
    try:
        return parts.entity, read_header(payload), encoded
    except BlockError as exc:
        raise _UnreadableError(parts.entity, exc.reason) from None


def _payload(item: Mapping[str, Any], where: str, line: int, owner: str, block: str) -> tuple[str, bytes]:
    """An exported item's binary attribute ``b``: as exported (base64) and decoded. Raises
    :class:`CorruptItem` naming ``owner`` (the item) when it is missing, ``block`` when not base64."""
    encoded = item.get("b", {}).get("B") if isinstance(item.get("b"), dict) else None
    if not isinstance(encoded, str):
        raise CorruptItem(where, line, f"{owner} has no binary block 'b'")
    try:
        return encoded, base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise CorruptItem(where, line, f"{block} is not base64") from None


_COMPACTED_HYBRID_PK = re.compile(r"^\d{4}#\d{4}-\d{2}-\d{2}T\d{2}:\d{2}" + re.escape(COMPACTED_PK_SUFFIX) + r"\Z")


def _in_write_tier(item: Mapping[str, Any]) -> bool:
    """Whether ``item`` is the write tier's: in a group's partition, a sub-item, a cluster or compacted block,
    or the compaction's state (kept in the control table; skipped should an export hold it)."""
    pk = _text(item, "pk") or ""
    return (
        pk.startswith((GROUP_PK_PREFIX, SUB_PK_PREFIX, CLUSTER_PK_PREFIX))
        or pk.endswith(COMPACTED_PK_SUFFIX)
        or pk == STATE_PK
    )


def _tier_blocks(
    item: Mapping[str, Any], where: str, line: int, selection: Selection
) -> list[tuple[str, BlockHeader, str]]:
    """The readings of a write-tier item as blocks of one entity within one 10-second window each
    (what the spill holds), of the item's version: a group item's or a cluster block's, per entity the
    selection takes; a compacted block's, per window. None of a dense mark (it holds no readings), nor of a
    sub-item (its readings are copies of the group items', which the export holds too)."""
    pk, sk = _text(item, "pk") or "", _text(item, "sk") or ""
    if sk.startswith(DENSE_MARK_PREFIX) or pk == STATE_PK or pk.startswith(SUB_PK_PREFIX):
        return []
    if pk.startswith(GROUP_PK_PREFIX):
        entity = "a group"
    elif pk.startswith(CLUSTER_PK_PREFIX):
        entity = "a cluster"
    elif _COMPACTED_HYBRID_PK.match(pk):
        entity = sk.split("#", 1)[0]
    else:
        entity = pk.removesuffix(COMPACTED_PK_SUFFIX)
    tier_item = f"the write-tier item of {entity}"
    _, payload = _payload(item, where, line, tier_item, tier_item)
    try:
        if pk.startswith(GROUP_PK_PREFIX):
            header, readings = decode_group(payload)
        elif pk.startswith(CLUSTER_PK_PREFIX):
            header, readings = decode_group(payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        else:
            header, readings = decode_block(entity, payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
    except BlockError as exc:
        raise _UnreadableError(entity, exc.reason) from None
    runs: dict[tuple[str, int], list[Reading]] = {}
    for reading in readings:  # in (time, entity, event id) order: so is each run
        if selection.takes_entity(reading.entity_id) and selection.takes(reading.ts_ms):
            runs.setdefault((reading.entity_id, reading.ts_ms // WINDOW_MS), []).append(reading)
    blocks = []
    for (owner, _), run in runs.items():
        block = encode_block(run, header.version)
        blocks.append((owner, read_header(block.payload), base64.b64encode(block.payload).decode()))
    return blocks


class _UnreadableError(Exception):
    """An item of ``entity`` whose keys are a readings table's but whose content does not decode."""

    def __init__(self, entity: str, reason: str) -> None:
        super().__init__(entity, reason)
        self.entity = entity
        self.reason = reason


def _text(item: Mapping[str, Any], name: str) -> str | None:
    value = item.get(name)
    text = value.get("S") if isinstance(value, dict) else None
    return text if isinstance(text, str) else None


# -- pass 2: spill files decoded, split while too large --------------------------------------------


@dataclass(slots=True)
class _Drain:
    sources: list[str]
    selection: Selection
    max_readings: int
    stats: ReadStats
    on_corrupt_block: _Report | None

    def drain(self, spill: _Spill, depth: int) -> Iterator[Reading]:
        self.stats.spill_files += 1
        if spill.readings > self.max_readings and depth < MAX_DEPTH and spill.records > 1:
            parts = self._split(spill, depth)
            os.unlink(spill.path)
            for part in parts:
                # A split that keeps everything in one part (one entity and window alone) cannot help.
                yield from self.drain(part, depth + 1 if len(parts) > 1 else MAX_DEPTH)
            return
        yield from self._decode(spill)
        os.unlink(spill.path)

    def _split(self, spill: _Spill, depth: int) -> list[_Spill]:
        parts: dict[int, _Spill] = {}
        for record in spill.records_in():
            entity, window = record[0], record[1]
            # A real hash: CRC32 is linear, so groups that collide at one depth would collide at every depth.
            digest = hashlib.blake2b(f"{depth}\n{entity}\n{window}".encode(), digest_size=8).digest()
            slot = int.from_bytes(digest, "big") % FANOUT
            part = parts.get(slot)
            if part is None:
                part = parts[slot] = _Spill(spill.path.with_name(f"{spill.path.name}.{slot}"))
            part.add(record, record[2])
        for part in parts.values():
            part.close()
        return list(parts.values())

    def _decode(self, spill: _Spill) -> Iterator[Reading]:
        copies: dict[tuple[str, int, str], tuple[int, Reading]] = {}
        held = 0
        for entity, window, _, stored, source, line, key in spill.records_in():
            try:
                if isinstance(stored, dict):  # an item of the format before blocks
                    header, reading = legacy_block(stored)
                    readings = [reading]
                else:
                    header, readings = decode_block(entity, base64.b64decode(stored))
            except BlockError as exc:
                # A block is in a record for each window it touches: it is reported from its first one
                # (an item of the format before blocks is in one window only).
                first_ms = (
                    window * WINDOW_MS if isinstance(stored, dict) else read_header(base64.b64decode(stored)).first_ms
                )
                if window == first_ms // WINDOW_MS:
                    self.stats.blocks -= 1
                    reason = f"block of {entity}, {key}: {exc.reason}"
                    _corrupt(self.sources[source], line, reason, stats=self.stats, report=self.on_corrupt_block)
                continue
            held += len(readings)
            keep_newest(copies, header.version, self._owned(readings, window))
        self.stats.held_max = max(self.stats.held_max, held)
        for reading in newest_wins(copies):
            self.stats.readings += 1
            yield reading

    def _owned(self, readings: Iterable[Reading], window: int) -> list[Reading]:
        """The readings this record answers for: those of its window that the selection takes."""
        takes: Callable[[int], bool] = self.selection.takes
        owned = [r for r in readings if r.ts_ms // WINDOW_MS == window and takes(r.ts_ms)]
        self.stats.copies += len(owned)
        return owned
