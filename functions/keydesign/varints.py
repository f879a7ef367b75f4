"""Unsigned LEB128 varints: the block header's numbers and protobuf's wire format, one writer, one reader.

Seven bits a byte, least significant first, the top bit set on every byte but the last. A value
of up to 64 bits takes at most ten bytes; the reader refuses anything longer, and a tenth byte
that would carry more than the 64th bit, as protobuf's Go decoder does. It accepts redundant
encodings (``0x80 0x00`` for 0), as protobuf's decoders do. A caller turns :class:`VarintError`
into its own error (a block's, a protobuf message's), saying whether the bytes were cut short.
"""

from __future__ import annotations

#: Most bytes a varint of a 64-bit value takes.
MAX_VARINT_BYTES = 10


class VarintError(ValueError):
    """Bytes that are not a varint: ``truncated`` when they end inside one, else it is longer than 64 bits."""

    def __init__(self, *, truncated: bool) -> None:
        self.truncated = truncated
        super().__init__("the bytes end inside a varint" if truncated else "a varint longer than 64 bits")


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` (0 or more) to ``out``."""
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


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` of ``data`` and the position after it; :class:`VarintError` if there is none."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise VarintError(truncated=True)
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            if shift == 63 and byte > 1:  # a tenth byte holds only the 64th bit
                raise VarintError(truncated=False)
            return result, pos
        shift += 7
        if shift > 63:
            raise VarintError(truncated=False)
