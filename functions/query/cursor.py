"""Pagination cursors: opaque, signed, versioned, and bound to the request.

A cursor names the last item a page returned, as its merge position
``(anchor, sk)``: ``anchor`` is the item's timestamp for per-entity reads and
the start of its (range-clipped) bucket for cross-entity reads, ``sk`` its
sort key. The next page re-plans from the anchor and resumes every partition
strictly after that position, so it neither skips nor repeats an item, however
many partitions the previous page ended inside.

Wire form (base64url, no padding)::

    version (1 byte) | HMAC-SHA256 (32 bytes) | binding (16 bytes) | position (UTF-8 JSON)

The MAC covers everything after itself and the version byte. ``binding`` is a
digest of the request parameters the position is only meaningful for (route,
key design, entity, range, order, projection); a cursor replayed on another
query fails the comparison. Failures are told apart so a client can tell a
bug (tampered, truncated) from a misuse (foreign cursor, old version).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Callable

from keydesign import InvalidInput, format_ts, parse_timestamp
from query.merge import Position

VERSION = 1
MAX_CURSOR_CHARS = 1024
MAX_SK_CHARS = 512  # entity 128 + event id 128 + timestamp 24 + separators, with room
_MAC_BYTES = 32
_BINDING_BYTES = 16
_HEADER_BYTES = 1 + _MAC_BYTES + _BINDING_BYTES
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]+\Z")
_DOMAIN = b"timeseries-query-cursor"


class CursorError(InvalidInput):
    """A cursor that cannot be honoured; always names the ``cursor`` parameter."""

    def __init__(self, reason: str) -> None:
        super().__init__("cursor", reason)


def binding(**params: object) -> bytes:
    """A digest of the request parameters a cursor belongs to (canonical JSON, SHA-256)."""
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).digest()[:_BINDING_BYTES]


class CursorCodec:
    """Signs and checks cursors with an HMAC key fetched on first use."""

    def __init__(self, key: Callable[[], bytes]) -> None:
        self._key = key

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key(), _DOMAIN + body, hashlib.sha256).digest()

    def encode(self, bound_to: bytes, position: Position) -> str:
        payload = json.dumps({"a": position.anchor, "s": position.sk}, separators=(",", ":"), ensure_ascii=True)
        body = bytes([VERSION]) + bound_to + payload.encode("ascii")
        raw = body[:1] + self._mac(body) + body[1:]
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    def decode(self, token: str, bound_to: bytes) -> Position:
        """The position in ``token``; :class:`CursorError` unless it is intact,
        of this version, and issued for the request ``bound_to`` describes."""
        if len(token) > MAX_CURSOR_CHARS:
            raise CursorError(f"is {len(token)} characters long; a cursor is at most {MAX_CURSOR_CHARS}")
        if not _TOKEN_RE.match(token):
            raise CursorError("is not a cursor this API issued (cursors are base64url text; pass it back unchanged)")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (binascii.Error, ValueError):
            raise CursorError("is truncated or not a cursor this API issued") from None
        # base64 ignores the spare bits of the last character: accept only the
        # one spelling this API issues, so no altered text passes as the same cursor.
        if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") != token:
            raise CursorError("has been altered or truncated, or was not issued by this API")
        if len(raw) <= _HEADER_BYTES:
            raise CursorError("is truncated or not a cursor this API issued")
        if raw[0] != VERSION:
            raise CursorError(f"has version {raw[0]}, which this API no longer reads; start again without a cursor")
        mac, body = raw[1 : 1 + _MAC_BYTES], raw[:1] + raw[1 + _MAC_BYTES :]
        if not hmac.compare_digest(mac, self._mac(body)):
            raise CursorError("has been altered or truncated, or was not issued by this API")
        if not hmac.compare_digest(body[1 : 1 + _BINDING_BYTES], bound_to):
            raise CursorError(
                "was issued for a different query (entity, from, to, order, measures or route differ); "
                "send the same parameters as the page it came from, or start again without a cursor"
            )
        return _position(body[1 + _BINDING_BYTES :])


def _position(payload: bytes) -> Position:
    # Only a holder of the key can get here, but a leaked key must still not
    # turn into a 500: check the shape as strictly as any other input.
    try:
        data = json.loads(payload.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise CursorError("carries an unreadable position") from None
    if not isinstance(data, dict) or set(data) != {"a", "s"}:
        raise CursorError("carries an unreadable position")
    anchor, sk = data["a"], data["s"]
    # An empty sort key is an anchor's opening (a page cut short before its first
    # item there): see query.merge.POSITION_MIN_SK.
    if not isinstance(anchor, str) or not isinstance(sk, str) or len(sk) > MAX_SK_CHARS:
        raise CursorError("carries an unreadable position")
    if not _is_canonical_ts(anchor):
        raise CursorError("carries an unreadable position")
    return Position(anchor, sk)


def _is_canonical_ts(text: str) -> bool:
    try:
        return format_ts(parse_timestamp(text, "cursor")) == text
    except (InvalidInput, ValueError):
        return False
