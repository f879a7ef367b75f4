"""The protobuf wire format's reader: a malformed message raises ProtobufError saying what, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.protowire import LENGTH, VARINT, ProtobufError, fields


def test_fields_of_a_message() -> None:
    assert fields(b"\x08\x96\x01" + b"\x12\x02hi") == [(1, VARINT, 150), (2, LENGTH, b"hi")]


@pytest.mark.parametrize(
    ("message", "says"),
    [
        (b"\x08", "truncated varint"),
        (b"\x08\x80", "truncated varint"),
        (b"\x12", "truncated varint"),
        (b"\x08" + b"\xff" * 10 + b"\x01", "varint longer than 64 bits"),
        (b"\x08" + b"\xff" * 9 + b"\x02", "varint longer than 64 bits"),  # a 65th bit
        (b"\x12\x05hi", "claims 5 bytes past the end"),
        (b"\x00", "field number 0"),
    ],
)
def test_a_malformed_message_is_refused_saying_what(message: bytes, says: str) -> None:
    with pytest.raises(ProtobufError, match=says):
        fields(message)


@settings(max_examples=300, deadline=None)
@given(message=st.binary(max_size=64))
def test_any_bytes_are_fields_or_a_protobuf_error(message: bytes) -> None:
    try:
        found = fields(message)
    except ProtobufError:
        return
    for number, wire, value in found:
        assert number >= 1
        assert isinstance(value, int) == (wire == VARINT)
        assert not isinstance(value, int) or value < 2**64
