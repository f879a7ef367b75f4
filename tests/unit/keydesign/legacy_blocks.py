"""The block writer before format 3 (commit 4a27161's ``encode_block``, as it was), kept to make
the blocks deployed tables hold: formats 1 (deflated) and 2 (as is), every column dense, no checksum."""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence

from keydesign.model import Reading, derive_event_id
from keydesign.varints import write_varint


def legacy_payload(readings: Sequence[Reading], version: int) -> bytes:
    """The payload the code before format 3 wrote for ``readings`` (one entity, in (time, event id) order)."""
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
    packer = zlib.compressobj(6, zlib.DEFLATED, -15)
    deflated = packer.compress(body) + packer.flush()
    head = bytearray([1 if len(deflated) < len(body) else 2])
    for number in (len(readings), first, previous - first):
        write_varint(number, head)
    version_bytes = version.to_bytes(max(1, (version.bit_length() + 7) // 8), "big")
    head.append(len(version_bytes))
    head += version_bytes
    return bytes(head) + (deflated if head[0] == 1 else body)
