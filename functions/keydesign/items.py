"""Item sizes, write units and read units, in DynamoDB's own accounting.

Every stored item is a block (:mod:`keydesign.blocks`): ``pk``, ``sk``, the payload
``b`` and ``ttl``. Attribute names are one to three characters on purpose: every byte
of every name is paid for in every item, on every write and every read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

from .model import Reading

MAX_ITEM_BYTES = 400 * 1024
WRITE_UNIT_BYTES = 1024
READ_UNIT_BYTES = 4096


def ttl_for(reading: Reading, retention_ms: int) -> int:
    """Expiry (epoch seconds) of a reading kept ``retention_ms`` past its event time."""
    return (reading.ts_ms + retention_ms) // 1000


def number_size(value: int | float | Decimal) -> int:
    """Bytes DynamoDB counts for a number: about one per two significant digits, plus one."""
    # normalize() trims trailing zeros; Decimal digits never have leading zeros.
    digits = Decimal(repr(value) if isinstance(value, float) else value).normalize().as_tuple().digits
    return min(21, math.ceil(len(digits) / 2) + 1)


def value_size(value: object) -> int:
    """Bytes DynamoDB counts for one attribute value."""
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if isinstance(value, bool) or value is None:
        return 1
    if isinstance(value, int | float | Decimal):
        return number_size(value)
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, Mapping):
        return 3 + sum(len(str(k).encode("utf-8")) + value_size(v) + 1 for k, v in value.items())
    if isinstance(value, list | tuple):
        return 3 + sum(value_size(v) + 1 for v in value)
    if isinstance(value, set | frozenset):
        return sum(value_size(v) for v in value)
    raise TypeError(f"no DynamoDB size for {type(value).__name__}")


def item_size(item: Mapping[str, object]) -> int:
    """Bytes of an item: every attribute name plus its value (DynamoDB's rules)."""
    return sum(len(name.encode("utf-8")) + value_size(value) for name, value in item.items())


def write_units(size_bytes: int) -> int:
    """Write units for one standard write of an item of ``size_bytes`` (1 per KB, rounded up)."""
    return max(1, math.ceil(size_bytes / WRITE_UNIT_BYTES))


def read_units(total_bytes: int, *, consistent: bool = False) -> float:
    """Read units for reading ``total_bytes`` in one Query (4 KB each, rounded up;
    eventually consistent reads cost half)."""
    units = max(1, math.ceil(total_bytes / READ_UNIT_BYTES))
    return float(units) if consistent else units / 2
