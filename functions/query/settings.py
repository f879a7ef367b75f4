"""Settings of the query Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings` (layout, shards, tables...):

======================  ====================================================  ==========
variable                meaning                                               default
======================  ====================================================  ==========
``CURSOR_SECRET_ARN``   Secrets Manager secret (name or ARN) whose value      (one of the
                        signs pagination cursors; read once per container     two is
``CURSOR_SECRET``       the signing key itself (local mode, tests); at least  required)
                        32 characters; used when no ARN is set
``MAX_RANGE``           widest ``to - from`` a read or aggregate may ask for  31d
``MAX_LIMIT``           largest page a client may ask for (1..1000)           1000
``LATEST_LOOKBACK``     how far back ``/latest`` looks (and its ``lookback``   7d
                        parameter's maximum)
``MAX_SCAN_ITEMS``      items an aggregate may read before it is refused       100000
                        with 413 (1..10,000,000)
``QUERY_CONCURRENCY``   partitions queried at once per request (1..64)        16
``MAX_QUERY_CALLS``     Query calls one page or aggregate may start before    200
                        it stops (a page returns what it found and a cursor;
                        an aggregate answers 413) (1..100,000)
``RESPONSE_MARGIN``     time kept back from the function's remaining time to  2s
                        serialize and send the answer: a page stops reading
                        at the function's deadline minus this
======================  ====================================================  ==========

A missing or malformed variable raises :class:`SettingsError` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from adapters.settings import CommonSettings, SettingsError, duration_ms, integer

#: The hard ceiling of ``limit``, whatever MAX_LIMIT says (and the OpenAPI maximum).
LIMIT_CEILING = 1000
#: The page size when the request names none (lowered to MAX_LIMIT if that is smaller).
DEFAULT_LIMIT = 100
MIN_SECRET_CHARS = 32


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """The bounds one request must stay within."""

    max_range_ms: int = 31 * 86_400_000
    max_limit: int = LIMIT_CEILING
    latest_lookback_ms: int = 7 * 86_400_000
    max_scan_items: int = 100_000
    concurrency: int = 16
    max_query_calls: int = 200
    response_margin_ms: int = 2_000

    @property
    def default_limit(self) -> int:
        return min(DEFAULT_LIMIT, self.max_limit)


@dataclass(frozen=True, slots=True)
class CursorSecretSource:
    """Where the cursor-signing key comes from: a Secrets Manager secret, or a literal."""

    secret_id: str | None
    literal: bytes | None


@dataclass(frozen=True, slots=True)
class QuerySettings:
    common: CommonSettings
    limits: QueryLimits
    cursor_secret: CursorSecretSource

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> QuerySettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        limits = QueryLimits(
            max_range_ms=_positive_duration(env, "MAX_RANGE", "31d"),
            max_limit=integer(env, "MAX_LIMIT", LIMIT_CEILING, 1, LIMIT_CEILING),
            latest_lookback_ms=_positive_duration(env, "LATEST_LOOKBACK", "7d"),
            max_scan_items=integer(env, "MAX_SCAN_ITEMS", 100_000, 1, 10_000_000),
            concurrency=integer(env, "QUERY_CONCURRENCY", 16, 1, 64),
            max_query_calls=integer(env, "MAX_QUERY_CALLS", 200, 1, 100_000),
            response_margin_ms=duration_ms(env, "RESPONSE_MARGIN", "2s"),
        )
        return cls(common=common, limits=limits, cursor_secret=_cursor_secret(env))


def _positive_duration(env: Mapping[str, str], name: str, default: str) -> int:
    value = duration_ms(env, name, default)
    if value <= 0:
        raise SettingsError(name, "must be longer than zero")
    return value


def _cursor_secret(env: Mapping[str, str]) -> CursorSecretSource:
    secret_id = env.get("CURSOR_SECRET_ARN", "").strip()
    if secret_id:
        return CursorSecretSource(secret_id=secret_id, literal=None)
    literal = env.get("CURSOR_SECRET", "")
    if not literal:
        raise SettingsError("CURSOR_SECRET_ARN", "is required (or CURSOR_SECRET, the key itself, outside AWS)")
    if len(literal) < MIN_SECRET_CHARS:
        raise SettingsError("CURSOR_SECRET", f"must be at least {MIN_SECRET_CHARS} characters")
    return CursorSecretSource(secret_id=None, literal=literal.encode("utf-8"))
