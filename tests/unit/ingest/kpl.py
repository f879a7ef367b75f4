"""KPL aggregated records, as the Kinesis Producer Library writes them: what the tests feed ingest.

Ingest only reads them (``ingest.kinesis_records.deaggregate``); this is the writing side.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ingest.kinesis_records import KPL_MAGIC
from ingest.protowire import LENGTH as _LENGTH
from ingest.protowire import VARINT as _VARINT
from keydesign.varints import write_varint


def aggregate(members: Sequence[tuple[str, bytes]], explicit_hash_keys: Sequence[str | None] | None = None) -> bytes:
    """Encode ``(partition_key, data)`` members as one KPL aggregated record."""
    keys: list[str] = []
    key_index: dict[str, int] = {}
    hash_keys: list[str] = []
    hash_index: dict[str, int] = {}
    body = bytearray()
    for position, (partition_key, data) in enumerate(members):
        pk_i = key_index.setdefault(partition_key, len(keys))
        if pk_i == len(keys):
            keys.append(partition_key)
        inner = bytearray(_tag(1, _VARINT) + _varint(pk_i))
        hash_key = explicit_hash_keys[position] if explicit_hash_keys is not None else None
        if hash_key is not None:
            hk_i = hash_index.setdefault(hash_key, len(hash_keys))
            if hk_i == len(hash_keys):
                hash_keys.append(hash_key)
            inner += _tag(2, _VARINT) + _varint(hk_i)
        inner += _tag(3, _LENGTH) + _varint(len(data)) + data
        body += _tag(3, _LENGTH) + _varint(len(inner)) + inner
    head = bytearray()
    for key in keys:
        encoded = key.encode("utf-8")
        head += _tag(1, _LENGTH) + _varint(len(encoded)) + encoded
    for hash_key in hash_keys:
        encoded = hash_key.encode("utf-8")
        head += _tag(2, _LENGTH) + _varint(len(encoded)) + encoded
    message = bytes(head + body)
    return KPL_MAGIC + message + hashlib.md5(message, usedforsecurity=False).digest()


def _tag(field_number: int, wire_type: int) -> bytes:
    return _varint(field_number << 3 | wire_type)


def _varint(value: int) -> bytes:
    out = bytearray()
    write_varint(value, out)
    return bytes(out)
