"""Blocks: what goes in comes out, once, the last copy winning, within the limits."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import BlockError, Layout, Reading, ShardMap, decode_block, item_size, write_units
from keydesign.blocks import (
    MAX_BLOCK_ITEM_BYTES,
    MAX_BLOCK_READINGS,
    MAX_BLOCK_SPAN_MS,
    encode_block,
    keep_newest,
    newest_wins,
    read_header,
)
from keydesign.items import MAX_ITEM_BYTES
from keydesign.layouts import parse_keys
from keydesign.model import MAX_DIMENSIONS, MAX_MEASURES, derive_event_id
from keydesign.timefmt import parse_timestamp

from .strategies import ENTITIES, ID_ALPHABET, PROPERTY, layouts

T0 = parse_timestamp("2026-11-22T06:00:00Z")

numbers = st.one_of(
    st.integers(-(10**38) + 1, 10**38 - 1),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-9e125, max_value=9e125).filter(
        lambda x: x == 0 or abs(x) >= 1e-130
    ),
)
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
texts = st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=12)


@st.composite
def raw_readings(draw: st.DrawFn, entity_id: str, ts: st.SearchStrategy[int]) -> dict[str, object]:
    raw: dict[str, object] = {
        "entity_id": entity_id,
        "timestamp": draw(ts),
        "measures": draw(st.dictionaries(names, numbers, min_size=1, max_size=4)),
    }
    if draw(st.booleans()):
        raw["dimensions"] = draw(st.dictionaries(names, texts, max_size=3))
    if draw(st.booleans()):
        raw["event_id"] = draw(st.text(alphabet=ID_ALPHABET, min_size=1, max_size=12))
    return raw


def same(a: Reading, b: Reading) -> bool:
    """Equal readings, ints staying ints and floats floats."""
    return (
        (a.entity_id, a.event_id, a.ts_ms, dict(a.dimensions)) == (b.entity_id, b.event_id, b.ts_ms, dict(b.dimensions))
        and dict(a.measures) == dict(b.measures)
        and all(type(a.measures[k]) is type(b.measures[k]) for k in a.measures)
    )


def stored_copies(layout: Layout, blocks: Sequence[object]) -> list[Reading]:
    """Every reading of ``blocks`` decoded from its payload, newest version kept."""
    copies: dict[tuple[str, int, str], tuple[int, Reading]] = {}
    for block in blocks:
        header, readings = decode_block(block.entity_id, block.encoded.payload)  # type: ignore[attr-defined]
        keep_newest(copies, header.version, readings)
    return newest_wins(copies)


# -- the payload ---------------------------------------------------------------------


@PROPERTY
@given(
    entity_id=st.sampled_from(ENTITIES),
    raws=st.lists(raw_readings("sensor-a", st.integers(T0, T0 + MAX_BLOCK_SPAN_MS - 1)), min_size=1, max_size=30),
    version=st.integers(0, 10**128 - 1),
)
def test_a_block_decodes_to_exactly_the_readings_encoded(
    entity_id: str, raws: list[dict[str, object]], version: int
) -> None:
    # Given valid readings of one entity, one per (time, event id), in stored order
    unique: dict[tuple[int, str], Reading] = {}
    for raw in raws:
        reading = Reading.parse({**raw, "entity_id": entity_id})
        unique[reading.ts_ms, reading.event_id] = reading
    readings = [unique[k] for k in sorted(unique)]
    # When they are encoded as one block of a Kinesis-sized version
    encoded = encode_block(readings, version)
    header, decoded = decode_block(entity_id, encoded.payload)
    # Then the same readings come back, derived event ids recomputed, with the header's facts
    assert len(decoded) == len(readings) == header.count
    assert all(same(a, b) for a, b in zip(readings, decoded, strict=True))
    assert (header.first_ms, header.last_ms, header.version) == (readings[0].ts_ms, readings[-1].ts_ms, version)


@PROPERTY
@given(raw=raw_readings("sensor-a", st.integers(10**11, 2**41)), entity_id=st.sampled_from(ENTITIES))
def test_a_derived_event_id_hashes_the_json_text_of_the_reading(raw: dict[str, object], entity_id: str) -> None:
    # Given any valid reading's content
    reading = Reading.parse({**raw, "entity_id": entity_id, "event_id": None})
    # Then its id is SHA-256 of json.dumps of its content (readers compute it again from a block)
    canonical = json.dumps(
        [entity_id, reading.ts_ms, sorted(reading.measures.items()), sorted(reading.dimensions.items())],
        separators=(",", ":"),
    )
    assert reading.event_id == f"h-{hashlib.sha256(canonical.encode()).hexdigest()[:16]}"
    assert derive_event_id(entity_id, reading.ts_ms, reading.measures, reading.dimensions) == reading.event_id


def test_derived_event_ids_are_not_stored_and_explicit_ones_are() -> None:
    # Given the same readings sent without event ids, and with ids of their own
    derived = [Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": i}}) for i in range(20)]
    explicit = [
        Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": i}, "event_id": f"ev-{i}"})
        for i in range(20)
    ]
    # When each set is encoded
    small, large = encode_block(derived, 1), encode_block(explicit, 1)
    # Then the derived ids cost nothing, and both decode to their own ids
    assert len(small.payload) < len(large.payload)
    assert [r.event_id for r in decode_block("s", small.payload)[1]] == [r.event_id for r in derived]
    assert [r.event_id for r in decode_block("s", large.payload)[1]] == [f"ev-{i}" for i in range(20)]
    assert all(r.event_id.startswith("h-") for r in derived)


def test_a_body_deflate_would_not_shrink_is_stored_as_it_is() -> None:
    # Given one small reading, and a few hundred
    one = [Reading.parse({"entity_id": "s", "timestamp": T0, "measures": {"v": 1}})]
    many = [Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": i % 7}}) for i in range(300)]
    # Then the first goes raw (format 2), the second deflated (format 1), and both decode
    assert encode_block(one, 1).payload[0] == 2
    assert encode_block(many, 1).payload[0] == 1
    assert len(encode_block(many, 1).payload) < 300 * 4
    assert [r.measures for r in decode_block("s", encode_block(many, 1).payload)[1]] == [r.measures for r in many]


def test_the_same_readings_make_the_same_block_and_another_version_another_one() -> None:
    readings = [Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": 1.5}}) for i in range(5)]
    assert encode_block(readings, 7) == encode_block(list(readings), 7)
    assert encode_block(readings, 7).block_id != encode_block(readings, 8).block_id
    assert encode_block(readings, 7).block_id != encode_block(readings[:4], 7).block_id


def _payload(version: int = 3) -> bytes:
    return encode_block([Reading.parse({"entity_id": "s", "timestamp": T0, "measures": {"v": 1}})], version).payload


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"", "empty"),
        (b"\x03" + _payload()[1:], "format 3"),
        (_payload()[:3], "ends inside its header"),
        (_payload()[:-4], "does not decompress"),
        (_payload()[: read_header(_payload()).body_at] + b"garbage", "does not decompress"),
        (_payload()[:9] + b"\x30", "ends inside its header"),
        (_payload()[:1] + b"\x02" + _payload()[2:], "do not hold the 2 readings"),
        (_payload()[:1] + b"\x00" + _payload()[2:], "counts no readings"),
        (b"\x01" + b"\xff" * 80, "longer than any"),
    ],
)
def test_a_payload_that_is_not_a_whole_block_is_refused_with_the_reason(payload: bytes, says: str) -> None:
    with pytest.raises(BlockError) as caught:
        decode_block("s", payload)
    assert caught.value.field == "b"
    assert says in caught.value.reason


def test_a_body_whose_times_disagree_with_the_header_is_refused() -> None:
    # Given a block whose header says its span is one ms longer than its readings' times
    good = _payload()
    header = read_header(good)
    span_at = 8  # format, count (1 byte), first_ms (6 bytes), then the span (0: one reading)
    assert good[span_at] == header.span_ms == 0
    forged = good[:span_at] + bytes([1]) + good[span_at + 1 :]
    # Then decoding refuses it rather than invent a time
    with pytest.raises(BlockError, match="do not end where the header says"):
        decode_block("s", forged)
    assert decode_block("s", good)[1]  # the rest of it is intact


# -- packing -------------------------------------------------------------------------


@PROPERTY
@given(
    layout=layouts(),
    data=st.data(),
    raws=st.lists(raw_readings("x", st.integers(T0 - 5 * 60_000, T0 + 5 * 60_000)), min_size=1, max_size=60),
)
def test_packing_stores_every_reading_once_the_last_copy_winning_within_the_limits(
    layout: Layout, data: st.DataObject, raws: list[dict[str, object]]
) -> None:
    # Given a batch of entries of several entities, some readings sent twice with different content
    shard_map = ShardMap.initial(layout.bucket, data.draw(st.integers(1, 4)))
    entries: list[tuple[Reading, int]] = []
    for version, raw in enumerate(raws, start=100):
        entity = data.draw(st.sampled_from(ENTITIES))
        reading = Reading.parse({**raw, "entity_id": entity})
        entries.append((reading, version))
        if data.draw(st.booleans()):  # a correction of it, published later in the batch
            entries.append((Reading(entity, reading.event_id, reading.ts_ms, {"fixed": version}), version + 1000))
    # When the batch is packed
    blocks = layout.pack(entries, shard_map, retention_ms=86_400_000, rng=random.Random(1))
    # Then every entry is accounted for by exactly one block
    origins = sorted(i for b in blocks for i in b.origins)
    assert origins == list(range(len(entries)))
    # ... every reading is stored once, as its last entry in the batch
    last = {(r.entity_id, r.ts_ms, r.event_id): r for r, _ in entries}
    stored = [r for b in blocks for r in b.readings]
    assert len(stored) == len(last)
    assert all(same(r, last[r.entity_id, r.ts_ms, r.event_id]) for r in stored)
    for block in blocks:
        # ... within the limits, in one bucket and table, in time order
        times = [r.ts_ms for r in block.readings]
        assert times == sorted(times)
        assert times[-1] - times[0] < MAX_BLOCK_SPAN_MS
        assert layout.bucket.start(times[0]) == layout.bucket.start(times[-1])
        assert block.key.table == layout.table_for(times[0])
        assert len(block.readings) <= MAX_BLOCK_READINGS
        assert block.size <= MAX_BLOCK_ITEM_BYTES or len(block.readings) == 1
        # ... billed as its item is sized, with the units in its key, expiring with its newest reading
        assert block.size == item_size(block.item())
        assert block.write_units == write_units(block.size)
        parts = parse_keys(block.key.pk, block.key.sk, layout.kind)
        assert parts is not None and (parts.entity, parts.write_units) == (block.entity_id, block.write_units)
        assert block.ttl == (times[-1] + 86_400_000) // 1000
        assert read_header(block.encoded.payload).version == max(
            entries[i][1] for i in block.origins if entries[i][0] in block.readings
        )
        assert block.key.pk in layout.partitions_of(block.entity_id, times[0], shard_map)
    # ... and packing the same batch again makes the same items (the random layout draws anew)
    again = layout.pack(entries, shard_map, retention_ms=86_400_000, rng=random.Random(1))
    assert [b.item() for b in again] == [b.item() for b in blocks]


@PROPERTY
@given(layout=layouts(), data=st.data())
def test_regrouped_redeliveries_keep_the_copy_published_last(layout: Layout, data: st.DataObject) -> None:
    # Given one shard's records in order (versions rising), readings corrected by later records
    shard_map = ShardMap.initial(layout.bucket, 2)
    entries: list[tuple[Reading, int]] = []
    for version in range(1, data.draw(st.integers(1, 40)) + 1):
        entity = data.draw(st.sampled_from(ENTITIES[:2]))
        ts = T0 + data.draw(st.integers(0, 3)) * 7_000
        value = data.draw(st.integers(0, 3))
        entries.append((Reading(entity, f"ev-{ts % 3}", ts, {"v": value}), version))
    # When batches of contiguous runs (the whole, then retried and bisected parts, in any order) are packed
    cuts = sorted(data.draw(st.lists(st.integers(0, len(entries)), max_size=4)))
    runs = [entries, *(entries[a:b] for a, b in zip([0, *cuts], [*cuts, len(entries)], strict=True) if a < b)]
    blocks = [b for run in data.draw(st.permutations(runs)) for b in layout.pack(run, shard_map, rng=random.Random(2))]
    # Then keeping each reading's copy from the newest block gives the copy published last
    last = {(r.entity_id, r.ts_ms, r.event_id): r for r, _ in entries}
    kept = stored_copies(layout, blocks)
    assert [(r.entity_id, r.ts_ms, r.event_id) for r in kept] == sorted(last)
    assert all(same(r, last[r.entity_id, r.ts_ms, r.event_id]) for r in kept)


def test_a_hot_entity_fills_blocks_to_the_reading_limit_and_a_span_cuts_the_rest() -> None:
    # Given 2,500 readings of one entity in 2.5 s, then one 20 s later (same hour)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 4)
    entries = [
        (Reading.parse({"entity_id": "hot", "timestamp": T0 + i, "measures": {"v": i}}), 1) for i in range(2_500)
    ]
    entries.append((Reading.parse({"entity_id": "hot", "timestamp": T0 + 22_000, "measures": {"v": 0}}), 1))
    # When packed
    blocks = layout.pack(entries, shard_map)
    # Then three blocks take the burst (1,000 + 1,000 + 500) and the late one has its own
    assert [len(b.readings) for b in blocks] == [1_000, 1_000, 500, 1]
    assert len({b.key.pk for b in blocks}) == 1


def test_large_readings_are_split_below_the_item_limit_and_a_huge_one_goes_alone() -> None:
    # Given readings as large as the reading limits allow (100 measures, 50 long dimensions)
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 3)
    rng = random.Random(5)

    def fat(i: int) -> Reading:
        return Reading.parse(
            {
                "entity_id": "fat",
                "timestamp": T0 + i,
                "measures": {f"m{k}": rng.random() for k in range(MAX_MEASURES)},
                "dimensions": {
                    f"d{k}": "".join(rng.choice("abcdefghij") for _ in range(256)) for k in range(MAX_DIMENSIONS)
                },
            }
        )

    # When 12 of them are packed
    blocks = layout.pack([(fat(i), 1) for i in range(12)], shard_map)
    # Then several blocks hold them, each under the block limit, none lost
    assert len(blocks) > 1
    assert sum(len(b.readings) for b in blocks) == 12
    assert all(b.size <= MAX_BLOCK_ITEM_BYTES for b in blocks)
    # And a single reading far over the block limit still makes one block under DynamoDB's own
    (alone,) = layout.pack([(fat(0), 1)], shard_map)
    assert alone.size < MAX_ITEM_BYTES / 4
