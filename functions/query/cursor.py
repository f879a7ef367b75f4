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

The key rotates (Secrets Manager staging labels, docs/deploy.md): a cursor is
signed with ``AWSCURRENT`` and accepted under ``AWSCURRENT`` or ``AWSPREVIOUS``,
so one issued just before a rotation still works after it, and one from two
rotations ago does not. :class:`CursorKeys` keeps them for ``CURSOR_KEY_TTL``
(the previous one fetched only once a cursor needs it) and, when a cursor
verifies under neither, fetches them again early, at most once per
:data:`MISS_REFRESH_MS` (a container that has not yet seen a rotation meets
cursors signed with the new key; forged cursors cannot make it fetch more).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import threading
import time
from collections.abc import Callable

from adapters.observability import logger
from adapters.secret_versions import CURRENT, MIN_SECRET_CHARS, PREVIOUS
from adapters.settings import SettingsError
from adapters.snapstart import forget_on_restore
from keydesign import InvalidInput, format_ts, parse_timestamp
from query.merge import Position
from query.settings import CursorSecretSource

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


#: A cursor no kept key verifies makes the keys be fetched again at most this often.
MISS_REFRESH_MS = 10_000


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class CursorKeys:
    """The key cursors are signed with and the keys they are accepted under, kept ``ttl_ms``.

    ``fetch(stage)`` gives the key at a staging label (``AWSCURRENT``, ``AWSPREVIOUS``),
    None when no version carries it. The current key is fetched on first use, again once
    ``ttl_ms`` has passed, and early on :meth:`refresh_after_miss`; the previous one only
    when a cursor does not verify under the current one (:meth:`with_previous`, once per
    fetch of the current key), since nearly every cursor was signed with the current key
    and a cold start or a restore then makes one call, not two. A failed refetch keeps
    the keys already held (and tries again after :data:`MISS_REFRESH_MS`): Secrets
    Manager being briefly unreachable must not fail reads that need no new key. A copy
    restored from a SnapStart snapshot fetches them again on first use: the key may have
    rotated while the snapshot waited, and no clock of the copy's measured that wait.
    """

    def __init__(
        self,
        fetch: Callable[[str], bytes | None],
        *,
        ttl_ms: int | None,
        clock_ms: Callable[[], int] = _monotonic_ms,
    ) -> None:
        self._fetch = fetch
        self._ttl_ms = ttl_ms
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._keys: tuple[bytes, ...] = ()
        self._previous_asked = False
        self._fetched_at = 0
        self._expires_at = 0
        forget_on_restore(self)

    def forget(self) -> None:
        with self._lock:
            self._keys, self._previous_asked, self._fetched_at, self._expires_at = (), False, 0, 0

    @classmethod
    def from_source(cls, source: CursorSecretSource, read: Callable[[str, str], bytes | None]) -> CursorKeys:
        """Keys from the function's settings: a fixed literal, or the secret read with ``read(secret_id, stage)``."""
        if source.secret_id is None:
            literal = source.literal or b""
            return cls(lambda stage: literal if stage == CURRENT else None, ttl_ms=None)
        secret_id = source.secret_id

        def fetch(stage: str) -> bytes | None:
            key = read(secret_id, stage)
            if key is not None and len(key) < MIN_SECRET_CHARS:
                raise SettingsError(
                    "CURSOR_SECRET_ARN", f"the secret ({stage}) must be at least {MIN_SECRET_CHARS} bytes"
                )
            return key

        return cls(fetch, ttl_ms=source.ttl_ms)

    def signing(self) -> bytes:
        """The key new cursors are signed with (``AWSCURRENT``)."""
        return self.accepted()[0]

    def accepted(self) -> tuple[bytes, ...]:
        """The keys a cursor may have been signed with: the current one first, then the previous
        one once :meth:`with_previous` has fetched it."""
        keys = self._keys
        if keys and (self._ttl_ms is None or self._clock_ms() < self._expires_at):
            return keys
        with self._lock:
            if not self._keys or (self._ttl_ms is not None and self._clock_ms() >= self._expires_at):
                self._load(previous=False)
            return self._keys

    def with_previous(self) -> bool:
        """Fetch the previous key if it was not asked for since the current one was fetched; True when
        that gave a key not held before. A failed fetch is logged and asked again after the next fetch."""
        if self._ttl_ms is None:
            return False
        with self._lock:
            if self._previous_asked or not self._keys:
                return False
            self._previous_asked = True
            try:
                previous = self._fetch(PREVIOUS)
            except Exception:
                logger.warning("the previous cursor key could not be fetched", exc_info=True)
                return False
            if previous is None or previous in self._keys:
                return False
            self._keys = (self._keys[0], previous)
            return True

    def refresh_after_miss(self) -> bool:
        """Fetch both keys again if they were last fetched :data:`MISS_REFRESH_MS` ago or more;
        True when that gave keys not held before."""
        if self._ttl_ms is None:
            return False
        with self._lock:
            if self._clock_ms() - self._fetched_at < MISS_REFRESH_MS:
                return False
            before = self._keys
            self._load(previous=True)
            return self._keys != before

    def _load(self, *, previous: bool) -> None:
        now = self._clock_ms()
        try:
            current = self._fetch(CURRENT)
            if current is None:
                raise SettingsError("CURSOR_SECRET_ARN", "the secret has no AWSCURRENT version")
            older = self._fetch(PREVIOUS) if previous else None
        except Exception:
            if not self._keys:
                raise
            logger.warning("cursor keys not refreshed; keeping the ones held", exc_info=True)
            self._fetched_at, self._expires_at = now, now + MISS_REFRESH_MS
            return
        self._keys = (current,) if older is None or older == current else (current, older)
        self._previous_asked = previous
        self._fetched_at, self._expires_at = now, now + (self._ttl_ms or 0)


class CursorCodec:
    """Signs and checks cursors; ``keys`` is a :class:`CursorKeys` or, for one fixed key, a function giving it."""

    def __init__(self, keys: CursorKeys | Callable[[], bytes]) -> None:
        self._keys = keys if isinstance(keys, CursorKeys) else CursorKeys(_only_current(keys), ttl_ms=None)

    def _verifies(self, mac: bytes, body: bytes) -> bool:
        keys = self._keys
        # The current key; then the previous one (a cursor signed before the last rotation); then,
        # perhaps the key has rotated since it was fetched, both again (rate-limited).
        return (
            _signed_by_one(mac, body, keys.accepted())
            or (keys.with_previous() and _signed_by_one(mac, body, keys.accepted()))
            or (keys.refresh_after_miss() and _signed_by_one(mac, body, keys.accepted()))
        )

    def encode(self, bound_to: bytes, position: Position) -> str:
        payload = json.dumps({"a": position.anchor, "s": position.sk}, separators=(",", ":"), ensure_ascii=True)
        body = bytes([VERSION]) + bound_to + payload.encode("ascii")
        raw = body[:1] + _mac(self._keys.signing(), body) + body[1:]
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
        if not self._verifies(mac, body):
            raise CursorError(
                "has been altered or truncated, was not issued by this API, or was signed with a key that has since "
                "been rotated out; start again without a cursor"
            )
        if not hmac.compare_digest(body[1 : 1 + _BINDING_BYTES], bound_to):
            raise CursorError(
                "was issued for a different query (entity, from, to, order, measures or route differ); "
                "send the same parameters as the page it came from, or start again without a cursor"
            )
        return _position(body[1 + _BINDING_BYTES :])


def _mac(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, _DOMAIN + body, hashlib.sha256).digest()


def _signed_by_one(mac: bytes, body: bytes, keys: tuple[bytes, ...]) -> bool:
    return any(hmac.compare_digest(mac, _mac(key, body)) for key in keys)


def _only_current(key: Callable[[], bytes]) -> Callable[[str], bytes | None]:
    return lambda stage: key() if stage == CURRENT else None


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
    canonical_ms(anchor)
    return Position(anchor, sk)


def canonical_ms(text: str) -> int:
    """The instant of a position's timestamp, which must be in the one spelling this API writes."""
    try:
        ms = parse_timestamp(text, "cursor")
    except (InvalidInput, ValueError):
        raise CursorError("carries an unreadable position") from None
    if format_ts(ms) != text:
        raise CursorError("carries an unreadable position")
    return ms
