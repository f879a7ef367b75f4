"""The stable hash that decides shards.

``stable_hash(text)`` is the first 8 bytes of SHA-256 over the UTF-8 bytes of
``text``, read as an unsigned big-endian integer. It is the same in every
process, interpreter, Python version and language (unlike the built-in
``hash()``, which is salted per process), so a producer in another language
can compute the same shard::

    shard = int.from_bytes(sha256(entity_id.encode()).digest()[:8], "big") % n

The modulo bias for n <= 10,000 over a 64-bit value is below 1e-15: negligible.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache


# Entity ids repeat batch after batch: a hit costs a tenth of the hash. 16,384 ids (the seed's
# 10,000 sensors fit) take about 3 MB; unique event ids (the calculated layout) only pass through.
@lru_cache(maxsize=16_384)
def stable_hash(text: str) -> int:
    """Return a 64-bit unsigned hash of ``text`` that never changes between runs."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big")


def shard_of(text: str, count: int) -> int:
    """Return ``stable_hash(text) mod count``: the shard, in ``[0, count)``, of ``text``."""
    if count < 1:
        raise ValueError(f"shard count must be at least 1, got {count}")
    return stable_hash(text) % count
