"""Varints, the one reader and writer of the block header and the protobuf wire format."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign.varints import MAX_VARINT_BYTES, VarintError, read_varint, write_varint

from .strategies import PROPERTY

U64 = st.integers(0, 2**64 - 1)


def encoded(value: int) -> bytes:
    out = bytearray()
    write_varint(value, out)
    return bytes(out)


@PROPERTY
@given(value=U64, before=st.binary(max_size=4), after=st.binary(max_size=4))
def test_a_written_varint_reads_back_from_where_it_starts_to_where_it_ends(
    value: int, before: bytes, after: bytes
) -> None:
    data = encoded(value)
    assert 1 <= len(data) <= MAX_VARINT_BYTES
    assert read_varint(before + data + after, len(before)) == (value, len(before) + len(data))


@PROPERTY
@given(value=U64, data=st.data())
def test_a_varint_cut_short_is_refused_as_truncated(value: int, data: st.DataObject) -> None:
    whole = encoded(value)
    cut = data.draw(st.integers(0, len(whole) - 1))
    with pytest.raises(VarintError) as caught:
        read_varint(whole[:cut], 0)
    assert caught.value.truncated


@PROPERTY
@given(data=st.binary(max_size=16), pos=st.integers(0, 17))
def test_any_bytes_are_a_64_bit_varint_or_refused_with_varint_error_only(data: bytes, pos: int) -> None:
    try:
        value, end = read_varint(data, pos)
    except VarintError:
        return
    assert 0 <= value < 2**64
    assert pos < end <= min(len(data), pos + MAX_VARINT_BYTES)
    assert not data[end - 1] & 0x80 and all(b & 0x80 for b in data[pos : end - 1])


@pytest.mark.parametrize(
    ("data", "value"),
    [
        (b"\x00", 0),
        (b"\x7f", 127),
        (b"\x80\x01", 128),
        (b"\x80\x00", 0),  # a redundant encoding, as protobuf's decoders take it
        (b"\xff" * 9 + b"\x01", 2**64 - 1),
        (b"\x80" * 9 + b"\x01", 2**63),
    ],
)
def test_edges_that_are_varints(data: bytes, value: int) -> None:
    assert read_varint(data, 0) == (value, len(data))


@pytest.mark.parametrize(
    ("data", "truncated"),
    [
        (b"", True),
        (b"\x80", True),
        (b"\xff" * 9, True),
        (b"\xff" * 9 + b"\x02", False),  # the tenth byte would carry a 65th bit
        (b"\x80" * 9 + b"\x7f", False),
        (b"\xff" * 10 + b"\x01", False),  # eleven bytes
        (b"\x80" * 11, False),
    ],
)
def test_edges_that_are_not(data: bytes, truncated: bool) -> None:
    with pytest.raises(VarintError) as caught:
        read_varint(data, 0)
    assert caught.value.truncated is truncated


def test_a_negative_number_is_not_written() -> None:
    with pytest.raises(ValueError, match="unsigned"):
        write_varint(-1, bytearray())
