"""Blocks: what goes in comes out, once, the last copy winning, within the limits."""

from __future__ import annotations

import hashlib
import json
import random
import zlib
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keydesign import BlockError, Layout, Reading, ShardMap, decode_block, item_size, write_units
from keydesign import layouts as layouts_module
from keydesign.blocks import (
    FORMAT,
    MAX_BLOCK_ITEM_BYTES,
    MAX_BLOCK_READINGS,
    MAX_BLOCK_SPAN_MS,
    MAX_RUN_BODY_BYTES,
    Encoded,
    encode_block,
    keep_newest,
    newest_wins,
    read_header,
)
from keydesign.items import MAX_ITEM_BYTES
from keydesign.layouts import parse_keys
from keydesign.model import MAX_DIMENSIONS, MAX_MEASURES, derive_event_id
from keydesign.timefmt import MAX_TS_MS, parse_timestamp
from keydesign.varints import write_varint

from .legacy_blocks import legacy_payload
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
    # Then both are format 3, the first stored as is (codec 1), the second deflated (codec 0), and both decode
    assert encode_block(one, 1).payload[:2] == bytes([FORMAT, 1])
    assert encode_block(many, 1).payload[:2] == bytes([FORMAT, 0])
    assert len(encode_block(many, 1).payload) < 300 * 4
    assert [r.measures for r in decode_block("s", encode_block(many, 1).payload)[1]] == [r.measures for r in many]


def test_the_same_readings_make_the_same_block_and_another_version_another_one() -> None:
    readings = [Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": 1.5}}) for i in range(5)]
    assert encode_block(readings, 7) == encode_block(list(readings), 7)
    assert encode_block(readings, 7).block_id != encode_block(readings, 8).block_id
    assert encode_block(readings, 7).block_id != encode_block(readings[:4], 7).block_id


def _payload(version: int = 3) -> bytes:
    return encode_block([Reading.parse({"entity_id": "s", "timestamp": T0, "measures": {"v": 1}})], version).payload


def forge(body: object, count: int = 1, span: int = 0, *, fmt: int = FORMAT, first: int = T0) -> bytes:
    """A payload of ``body`` (JSON, or bytes as they are) stored as is, under a header that says
    ``count`` and ``span``: format 3 with a checksum that matches, or format 2 (no checksum)."""
    text = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
    head = bytearray([fmt, 1] if fmt == FORMAT else [fmt])
    for number in (count, first, span):
        write_varint(number, head)
    head += b"\x01\x07"  # version 7
    if fmt != FORMAT:
        return bytes(head) + text
    return bytes(head) + zlib.crc32(text, zlib.crc32(head)).to_bytes(4, "big") + text


def body_of(payload: bytes) -> bytes:
    """The uncompressed body of a well-formed payload."""
    header = read_header(payload)
    raw = payload[header.body_at :]
    return zlib.decompress(raw, -15) if header.deflated else raw


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (b"", "empty"),
        (b"\x09" + _payload()[1:], "format 9 is not one this code reads (1 to 5)"),
        (b"\x06" + _payload()[1:], "a newer writer's"),
        (b"\x05" + _payload()[1:], "format is 5, not a block"),
        (b"\x04" + _payload()[1:], "format is 4, not a block"),
        (_payload()[:3], "ends inside its header"),
        (_payload()[:-4], "checksum does not match"),
        (_payload()[: read_header(_payload()).body_at] + b"garbage", "checksum does not match"),
        (_payload()[:10] + b"\x30", "ends inside its header"),
        (_payload()[:2] + b"\x02" + _payload()[3:], "checksum does not match"),
        (b"\x01" + b"\xff" * 80, "longer than any"),
        (b"\x01" + b"\xff" * 9 + b"\x02" + _payload()[3:], "longer than any"),  # a count past 64 bits
        (forge([[0, 0], {"v": [1, 2]}], count=2)[:-3] + b"3}]", "checksum does not match"),
        (forge([[0], {"v": [1]}], count=0), "counts 0 readings"),
        (forge([[0], {"v": [1]}], count=1_001), "counts 1001 readings; a block holds 1 to 1000"),
        (forge([[0], {"v": [1]}], first=MAX_TS_MS + 1), "past 9999"),
        (forge([[0], {"v": [1]}], fmt=2, count=2), "not a list of the 2 readings the header counts"),
    ],
)
def test_a_payload_that_is_not_a_whole_block_is_refused_with_the_reason(payload: bytes, says: str) -> None:
    with pytest.raises(BlockError) as caught:
        decode_block("s", payload)
    assert caught.value.field == "b"
    assert says in caught.value.reason


def test_a_body_whose_times_disagree_with_the_header_is_refused() -> None:
    # Given a format-2 block (no checksum) whose header says its span is one ms longer than its readings' times
    good = legacy_payload([Reading.parse({"entity_id": "s", "timestamp": T0, "measures": {"v": 1}})], 3)
    header = read_header(good)
    span_at = 8  # format, count (1 byte), first_ms (6 bytes), then the span (0: one reading)
    assert good[span_at] == header.span_ms == 0
    forged = good[:span_at] + bytes([1]) + good[span_at + 1 :]
    # Then decoding refuses it rather than invent a time
    with pytest.raises(BlockError, match="do not end where the header says"):
        decode_block("s", forged)
    assert decode_block("s", good)[1]  # the rest of it is intact


ONE = {"v": [1]}


@pytest.mark.parametrize("fmt", [FORMAT, 2])
@pytest.mark.parametrize(
    ("body", "count", "span", "says"),
    [
        # times
        ([["0"], ONE], 1, 0, "time delta is not a whole number"),
        ([[0.0], ONE], 1, 0, "time delta is not a whole number"),
        ([[False], ONE], 1, 0, "time delta is not a whole number"),
        ([0, ONE], 1, 0, "time deltas are not a list"),
        ([[0, 5, -5], {"v": [1, 2, 3]}], 3, 0, "not in time order"),
        ([[3], ONE], 1, 3, "the time deltas are not 0 and then non-negative"),
        ([[0, 15_000], {"v": [1, 2]}], 2, 15_000, "span is 15000 ms; a block's readings lie within 10000 ms"),
        # measures
        ([[0], {"v": [float("nan")]}], 1, 0, "NaN is not a number a block holds"),
        ([[0], {"v": [float("inf")]}], 1, 0, "Infinity is not a number a block holds"),
        (b'[[0],{"v":[1e999]}]', 1, 0, "not finite"),
        ([[0], {"v": [True]}], 1, 0, "the measure 'v' holds bool, not only numbers"),
        ([[0], {"v": ["3"]}], 1, 0, "the measure 'v' holds str, not only numbers"),
        ([[0], {"v": [[1]]}], 1, 0, "holds list, not only numbers"),
        ([[0], {"v": [10**400]}], 1, 0, "not finite"),
        ([[0], {"v": 1}], 1, 0, "the measure 'v' is not a column"),
        ([[0], {"v": [1, 2]}], 1, 0, "the measure 'v' does not hold the 1 readings"),
        ([[0], {"a b": [1]}], 1, 0, "the measure name 'a b' is not one a reading may have"),
        ([[0], {"1x": [1]}], 1, 0, "the measure name '1x' is not one"),
        ([[0], [1]], 1, 0, "the measures are not an object"),
        ([[0, 1], {"v": [1, None]}], 2, 1, "reading 1 of the block has no measure"),
        ([[0], {}], 1, 0, "reading 0 of the block has no measure"),
        (b'[[0],{"v":[1],"v":[2]}]', 1, 0, "names one key twice"),
        # event ids
        ([[0], ONE, [7]], 1, 0, "the event id '7' is not one"),
        ([[0], ONE, ["a#b"]], 1, 0, "the event id 'a#b' is not one"),
        ([[0], ONE, [""]], 1, 0, "the event id '' is not one"),
        ([[0], ONE, ["x" * 129]], 1, 0, "is not one a reading may have"),
        ([[0], ONE, "e1"], 1, 0, "the event ids are not a list"),
        ([[0, 0], {"v": [1, 2]}, ["b", "a"]], 2, 0, "not in ascending (time, event id) order"),
        ([[0, 0], {"v": [1, 2]}, ["a", "a"]], 2, 0, "each once"),
        # dimensions
        ([[0], ONE, None, [["site", "x"]]], 1, 0, "the dimensions are not an object"),
        ([[0], ONE, None, {"site": [3]}], 1, 0, "the dimension 'site' holds a value that is not a string"),
        ([[0], ONE, None, {"site": "x"}], 1, 0, "the dimension 'site' is not a column"),
        ([[0], ONE, None, {"site": ["a\nb"]}], 1, 0, "holds a control character"),
        ([[0], ONE, None, {"site": ["x" * 257]}], 1, 0, "longer than 256 characters"),
        (b'[[0],{"v":[1]},null,{"site":["\\udc80"]}]', 1, 0, "lone surrogate"),
        # the body
        ({"deltas": [0]}, 1, 0, "the body is not the columns of a block"),
        ([[0]], 1, 0, "the body is not the columns of a block"),
        ([[0], ONE, None, None, None], 1, 0, "the body is not the columns of a block"),
        (b"\xff[[0],{}]", 1, 0, "not UTF-8 JSON"),
        (b'[[0],{"v":[1]}] x', 1, 0, "not UTF-8 JSON"),
    ],
)
def test_a_malformed_column_is_refused_naming_it(fmt: int, body: object, count: int, span: int, says: str) -> None:
    # Given a body that no writer makes, in a payload whose header (and checksum) are right
    payload = forge(body, count, span, fmt=fmt)
    # Then it is refused with a BlockError saying what is wrong, never decoded into other readings
    with pytest.raises(BlockError) as caught:
        decode_block("s", payload)
    assert says in caught.value.reason


@pytest.mark.parametrize(
    ("column", "says"),
    [
        ({"i": [1, 0], "v": [1, 2]}, "indexes that are not whole numbers ascending"),
        ({"i": [0, 0], "v": [1, 2]}, "indexes that are not whole numbers ascending"),
        ({"i": [3], "v": [1]}, "an index outside the 3 readings"),
        ({"i": [-1], "v": [1]}, "an index outside the 3 readings"),
        ({"i": [0.0], "v": [1]}, "indexes that are not whole numbers"),
        ({"i": [0], "v": [None]}, "holds a null"),
        ({"i": [0], "v": [1, 2]}, "not two lists of the same length"),
        ({"i": [0], "v": [True]}, "holds bool"),
        ({"i": [0]}, "is not a column"),
        ({"i": [0], "v": [1], "x": 1}, "is not a column"),
    ],
)
def test_a_malformed_sparse_column_is_refused(column: object, says: str) -> None:
    payload = forge([[0, 1, 1], {"v": [1, 2, 3], "w": column}], 3, 2)
    with pytest.raises(BlockError) as caught:
        decode_block("s", payload)
    assert says in caught.value.reason


def test_formats_1_and_2_have_no_sparse_columns() -> None:
    body = [[0, 1, 1], {"v": [1, 2, 3], "w": {"i": [1], "v": [5]}}]
    assert [r.measures for r in decode_block("s", forge(body, 3, 2))[1]] == [{"v": 1}, {"v": 2, "w": 5}, {"v": 3}]
    with pytest.raises(BlockError, match="the measure 'w' is not a column"):
        decode_block("s", forge(body, 3, 2, fmt=2))


def test_a_deflated_body_must_be_one_whole_stream() -> None:
    readings = [Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": i % 3}}) for i in range(50)]
    good = legacy_payload(readings, 1)
    assert good[0] == 1 and decode_block("s", good)[1] == readings
    with pytest.raises(BlockError, match="bytes follow its DEFLATE stream"):
        decode_block("s", good + b"\x00")
    with pytest.raises(BlockError, match="its DEFLATE stream is cut short"):
        decode_block("s", good[:-3])


def test_every_column_is_checked_in_the_readers_own_terms() -> None:
    # A dimensions column that is a list used to vanish, NaN, true and strings to come back as measures
    for body in (
        [[0], ONE, None, ["site"]],
        [[0], {"v": [True]}],
        [[0], {"v": ["1.5"]}],
        [[0], ONE, [12]],
    ):
        with pytest.raises(BlockError):
            decode_block("s", forge(body, fmt=2))
    # ... and a well-formed one decodes, types kept
    (reading,) = decode_block("s", forge([[0], {"a": [1], "b": [1.5]}, ["e1"], {"site": ["x"]}], fmt=2))[1]
    assert (reading.measures, reading.dimensions, reading.event_id) == ({"a": 1, "b": 1.5}, {"site": "x"}, "e1")
    assert type(reading.measures["a"]) is int and type(reading.measures["b"]) is float


def test_the_checksum_covers_every_byte_but_its_own() -> None:
    # Given a deflated block of format 3
    readings = [
        Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": i}, "event_id": f"e{i}"})
        for i in range(40)
    ]
    payload = encode_block(readings, 12345).payload
    header = read_header(payload)
    assert (header.format_version, header.deflated) == (FORMAT, True)
    crc_at = header.body_at - 4
    # Then flipping any bit of it is refused (the checksum's own bytes included) ...
    for at in range(len(payload)):
        for bit in range(8):
            flipped = bytearray(payload)
            flipped[at] ^= 1 << bit
            with pytest.raises(BlockError):
                decode_block("s", bytes(flipped))
    # ... and header readers see the mismatch without inflating the body
    damaged = payload[:-1] + bytes([payload[-1] ^ 1])
    with pytest.raises(BlockError, match="checksum does not match"):
        read_header(damaged)
    assert int.from_bytes(payload[crc_at : header.body_at], "big") == zlib.crc32(
        payload[header.body_at :], zlib.crc32(payload[:crc_at])
    )


@PROPERTY
@given(
    raws=st.lists(raw_readings("sensor-a", st.integers(T0, T0 + MAX_BLOCK_SPAN_MS - 1)), min_size=1, max_size=12),
    downgrade=st.sampled_from([1, 2]),
)
def test_a_format_3_payload_read_as_format_1_or_2_is_refused(raws: list[dict[str, object]], downgrade: int) -> None:
    # Given any block of format 3 whose first byte is damaged into an older format's, which has no checksum
    payload = encode_block(ordered(raws), 1).payload
    # Then it is still refused: the codec byte reads as a count of 0, or the time as a span past 10 s
    with pytest.raises(BlockError):
        decode_block("sensor-a", bytes([downgrade]) + payload[1:])


def ordered(raws: list[dict[str, object]], entity_id: str = "sensor-a") -> list[Reading]:
    """Valid readings of one entity, one per (time, event id), in stored order."""
    unique: dict[tuple[int, str], Reading] = {}
    for raw in raws:
        reading = Reading.parse({**raw, "entity_id": entity_id})
        unique[reading.ts_ms, reading.event_id] = reading
    return [unique[k] for k in sorted(unique)]


@PROPERTY
@given(
    entity_id=st.sampled_from(ENTITIES),
    raws=st.lists(raw_readings("sensor-a", st.integers(T0, T0 + MAX_BLOCK_SPAN_MS - 1)), min_size=1, max_size=30),
    version=st.integers(0, 10**56),
)
def test_blocks_of_formats_1_and_2_still_decode_to_what_was_written(
    entity_id: str, raws: list[dict[str, object]], version: int
) -> None:
    # Given a block the code before format 3 wrote (deployed tables hold them)
    readings = ordered(raws, entity_id)
    payload = legacy_payload(readings, version)
    # Then it decodes to its readings, with its header's facts
    header, decoded = decode_block(entity_id, payload)
    assert header.format_version in (1, 2) and header.version == version
    assert all(same(a, b) for a, b in zip(readings, decoded, strict=True)) and len(decoded) == len(readings)


def test_a_block_of_dense_columns_keeps_the_body_and_the_id_it_had() -> None:
    # Given readings every one of which has every name (the usual sensor)
    readings = [
        Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"t": 20.5 + i, "rh": 40}}) for i in range(9)
    ]
    # Then format 3 stores the same body as before, so the block id (of the body) is the one the old code gave
    old = legacy_payload(readings, 5)
    new = encode_block(readings, 5)
    assert body_of(new.payload) == zlib.decompress(old[read_header(old).body_at :], -15)
    assert len(new.payload) == len(old) + 5  # the codec byte and the checksum
    assert new.block_id == hashlib.sha256(b"s\n5\n" + body_of(new.payload)).hexdigest()[:12]


# -- any damage: decoded as written, or refused ----------------------------------------------

mutations = st.lists(
    st.one_of(
        st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
        st.tuples(st.just("cut"), st.integers(0, 10**6), st.just(0)),
        st.tuples(st.just("byte"), st.integers(0, 10**6), st.integers(0, 255)),
        st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 255)),
        st.tuples(st.just("drop"), st.integers(0, 10**6), st.just(0)),
    ),
    min_size=1,
    max_size=4,
)


def mutate(payload: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    data = bytearray(payload)
    for kind, where, value in edits:
        at = where % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << value
        elif kind == "cut":
            del data[at:]
        elif kind == "byte" and at < len(data):
            data[at] = value
        elif kind == "insert":
            data.insert(at, value)
        elif kind == "drop" and at < len(data):
            del data[at]
    return bytes(data)


def decodes_as_written_or_is_refused(entity_id: str, payload: bytes, readings: list[Reading]) -> bool:
    """True when ``payload`` decodes to exactly ``readings`` or raises BlockError; any other exception propagates."""
    try:
        _, decoded = decode_block(entity_id, payload)
    except BlockError:
        return True
    return len(decoded) == len(readings) and all(same(a, b) for a, b in zip(readings, decoded, strict=True))


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raws=st.lists(raw_readings("sensor-a", st.integers(T0, T0 + MAX_BLOCK_SPAN_MS - 1)), min_size=1, max_size=20),
    version=st.integers(0, 10**56),
    edits=mutations,
    garbage=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_any_damage_to_a_block_decodes_to_what_was_encoded_or_raises_block_error(
    raws: list[dict[str, object]], version: int, edits: list[tuple[str, int, int]], garbage: bytes | None
) -> None:
    # Given any block, damaged by flipped bits, cuts, overwritten, inserted or dropped bytes, or replaced by garbage
    readings = ordered(raws)
    payload = encode_block(readings, version).payload
    damaged = garbage if garbage is not None else mutate(payload, edits)
    # Then decoding it gives back exactly what was encoded or raises BlockError: nothing else
    assert decodes_as_written_or_is_refused("sensor-a", damaged, readings)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    raws=st.lists(raw_readings("sensor-a", st.integers(T0, T0 + MAX_BLOCK_SPAN_MS - 1)), min_size=1, max_size=20),
    edits=mutations,
)
def test_a_damaged_block_of_format_1_or_2_decodes_to_valid_readings_or_raises_block_error(
    raws: list[dict[str, object]], edits: list[tuple[str, int, int]]
) -> None:
    # Given a block of the formats before the checksum, damaged: what it held cannot be told, but
    payload = mutate(legacy_payload(ordered(raws), 9), edits)
    # Then decoding it raises BlockError or gives readings that are valid readings, in order, each once
    try:
        _, decoded = decode_block("sensor-a", payload)
    except BlockError:
        return
    assert all(Reading.parse(r.to_json()) == r for r in decoded)
    keys = [(r.ts_ms, r.event_id) for r in decoded]
    assert keys == sorted(set(keys)) and keys[-1][0] - keys[0][0] < MAX_BLOCK_SPAN_MS


def test_thousands_of_random_bit_flips_and_cuts_never_decode_into_other_readings() -> None:
    # Given 8,000 random damages (bit flips, cuts) of blocks of format 3: the code before it decoded 443
    # of these 8,000 damages of its own blocks into other readings without an error
    rng = random.Random(36)
    wrong = 0
    for trial in range(8_000):
        if trial % 100 == 0:
            readings = [
                Reading.parse(
                    {
                        "entity_id": "s",
                        "timestamp": T0 + 7 * i,
                        "measures": {"t": rng.choice([1, 2.5, -3]), "rh": rng.randrange(100)},
                        **({"dimensions": {"site": "p7"}} if i % 2 else {}),
                    }
                )
                for i in range(rng.randrange(1, 30))
            ]
            readings.sort(key=lambda r: (r.ts_ms, r.event_id))
            payload = encode_block(readings, rng.randrange(10**20)).payload
        if rng.random() < 0.8:
            edits = [("flip", rng.randrange(len(payload)), rng.randrange(8)) for _ in range(rng.randrange(1, 4))]
        else:
            edits = [("cut", rng.randrange(len(payload)), 0)]
        # Then every one raises BlockError (a damage that changes nothing cannot happen: flips and cuts change bytes)
        wrong += not decodes_as_written_or_is_refused("s", mutate(payload, edits), readings)
    assert wrong == 0


def test_an_encoder_refuses_what_no_block_may_hold() -> None:
    def at(ms: int, event_id: str = "e") -> Reading:
        return Reading.parse({"entity_id": "s", "timestamp": T0 + ms, "measures": {"v": 1}, "event_id": event_id})

    with pytest.raises(ValueError, match="within 10000 ms"):
        encode_block([at(0), at(MAX_BLOCK_SPAN_MS)], 1)
    with pytest.raises(ValueError, match="ascending"):
        encode_block([at(5), at(0)], 1)
    with pytest.raises(ValueError, match="ascending"):
        encode_block([at(0), at(0)], 1)
    with pytest.raises(ValueError, match="at most 1000"):
        encode_block([at(i % 10, f"e{i}") for i in range(1_001)], 1)


# -- size: linear in the readings, for any mix of names --------------------------------------


def unique_names(count: int, names: int = 100, dimensions: bool = False) -> list[Reading]:
    """``count`` readings, each with ``names`` measure (or dimension) names no other reading has."""
    out = []
    for i in range(count):
        fields = {f"n{i}_{k}": float(i * 1_000 + k) + 0.5 for k in range(names)}
        raw: dict[str, object] = {"entity_id": "s", "timestamp": T0 + i, "measures": fields, "event_id": f"e{i:04}"}
        if dimensions:
            raw["measures"] = {"v": i}
            raw["dimensions"] = {name: f"value-{value}" for name, value in list(fields.items())[:MAX_DIMENSIONS]}
        out.append(Reading.parse(raw))
    return out


@pytest.mark.parametrize("dimensions", [False, True])
def test_a_body_grows_with_the_readings_not_with_readings_times_names(dimensions: bool) -> None:
    # Given 40, then 80 readings, each with names no other reading has
    small, large = (body_of(encode_block(unique_names(n, dimensions=dimensions), 1).payload) for n in (40, 80))
    # Then twice the readings make about twice the body (padding every name to the block's length made it 4x)
    assert len(large) / len(small) < 2.1
    # ... and a name only some readings have is stored where it is, not padded with nulls
    assert b"null" not in large


def test_a_name_half_the_readings_have_stays_a_dense_column() -> None:
    readings = [
        Reading.parse({"entity_id": "s", "timestamp": T0 + i, "measures": {"v": i, **({"w": 1} if i % 2 else {})}})
        for i in range(10)
    ]
    body = json.loads(body_of(encode_block(readings, 1).payload))
    assert body[1]["w"] == [None, 1] * 5
    assert decode_block("s", encode_block(readings, 1).payload)[1] == readings


@pytest.mark.parametrize("dimensions", [False, True])
def test_packing_readings_with_unique_names_encodes_each_reading_a_bounded_number_of_times(
    dimensions: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 300 readings of one entity in 300 ms, each with 100 measure (or 50 dimension) names no other has
    readings = unique_names(300, dimensions=dimensions)
    encoded: list[tuple[int, int]] = []  # (readings, body bytes) of every block encoded, kept or cut again

    def counting(run: Sequence[Reading], version: int) -> Encoded:
        result = encode_block(run, version)
        encoded.append((len(run), len(body_of(result.payload))))
        return result

    monkeypatch.setattr(layouts_module, "encode_block", counting)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    # When they are packed
    blocks = layout.pack([(r, 1) for r in readings], ShardMap.initial(layout.bucket, 4))
    # Then every reading is stored, in blocks within the limit ...
    assert stored_copies(layout, blocks) == readings
    assert all(b.size <= MAX_BLOCK_ITEM_BYTES for b in blocks)
    # ... each encoded a few times at most (cut runs are halved a bounded number of times), and no encoded
    # body is larger than a few times a run's bound: work and memory grow with the readings, not their square
    assert sum(n for n, _ in encoded) <= 8 * len(readings)
    assert max(size for _, size in encoded) <= 2 * MAX_RUN_BODY_BYTES


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
