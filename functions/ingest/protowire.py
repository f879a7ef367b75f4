"""The protocol buffers wire format, read: enough for the two messages ingest meets.

Two readers use it: KPL aggregates (``ingest.kinesis_records``) and OTLP metrics
(``ingest.formats.otlp``). Hand-written, stdlib only, rather than ``protobuf`` and
generated classes, which the Lambda asset would have to bundle (docs/decisions.md,
"OTLP protobuf without protobuf", has the measured size and import time).

:func:`fields` splits one message into its fields; a caller decodes the ones it
knows by number and wire type and skips the rest, as protobuf's own parsers do with
unknown fields. Anything that is not a well-formed message raises
:class:`ProtobufError` saying what.
"""

from __future__ import annotations

import struct

from keydesign.varints import VarintError, read_varint

VARINT = 0
FIXED64 = 1
LENGTH = 2
FIXED32 = 5

_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")
_UINT64 = struct.Struct("<Q")


class ProtobufError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    """Every (field number, wire type, value) of one message; unknown fields are kept for the caller to skip.

    A varint is an int; a length-delimited field, a fixed64 and a fixed32 are their bytes."""
    try:
        return _fields(buf)
    except VarintError as exc:
        raise ProtobufError("truncated varint" if exc.truncated else "varint longer than 64 bits") from None


def _fields(buf: bytes) -> list[tuple[int, int, int | bytes]]:
    out: list[tuple[int, int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 0x7
        if number == 0:
            raise ProtobufError("field number 0")
        value: int | bytes
        if wire == VARINT:
            value, pos = read_varint(buf, pos)
        elif wire == LENGTH:
            length, pos = read_varint(buf, pos)
            if pos + length > len(buf):
                raise ProtobufError(f"field {number} claims {length} bytes past the end")
            value, pos = buf[pos : pos + length], pos + length
        elif wire in (FIXED64, FIXED32):
            width = 8 if wire == FIXED64 else 4
            if pos + width > len(buf):
                raise ProtobufError(f"field {number} is truncated")
            value, pos = buf[pos : pos + width], pos + width
        else:
            raise ProtobufError(f"unsupported wire type {wire} for field {number}")
        out.append((number, wire, value))
    return out


def text(value: int | bytes, what: str) -> str:
    """A ``string`` field's value."""
    if not isinstance(value, bytes):
        raise ProtobufError(f"{what} is not a length-delimited field")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtobufError(f"{what} is not UTF-8") from None


def message(value: int | bytes, what: str) -> bytes:
    """A message (or ``bytes``) field's value."""
    if not isinstance(value, bytes):
        raise ProtobufError(f"{what} is not a length-delimited field")
    return value


def _fixed64(value: int | bytes, what: str) -> bytes:
    if not isinstance(value, bytes) or len(value) != 8:
        raise ProtobufError(f"{what} is not a 64-bit fixed-width field")
    return value


def double(value: int | bytes, what: str) -> float:
    """A ``double`` field's value."""
    return float(_DOUBLE.unpack(_fixed64(value, what))[0])


def fixed64(value: int | bytes, what: str) -> int:
    """A ``fixed64`` field's value."""
    return int(_UINT64.unpack(_fixed64(value, what))[0])


def sfixed64(value: int | bytes, what: str) -> int:
    """An ``sfixed64`` field's value."""
    return int(_INT64.unpack(_fixed64(value, what))[0])


def varint(value: int | bytes, what: str) -> int:
    """A varint field's value, as written (uint32, uint64, bool, enum)."""
    if not isinstance(value, int):
        raise ProtobufError(f"{what} is not a varint")
    return value


def int64(value: int | bytes, what: str) -> int:
    """An ``int64`` field's value (two's complement in a 64-bit varint)."""
    number = varint(value, what)
    return number - (1 << 64) if number >= 1 << 63 else number
