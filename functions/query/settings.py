"""Settings of the query Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; docs/configuration.md
lists every variable (from the model). One of ``CURSOR_SECRET_ARN`` and
``CURSOR_SECRET`` (local only) is required. The bounds of one request are
:class:`QueryLimits`' defaults (docs/query.md): constants, as no deployment
has needed others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from pydantic import model_validator

from adapters.secret_versions import MIN_SECRET_CHARS
from adapters.settings import CommonSettings, env

#: The hard ceiling of ``limit`` (and the OpenAPI maximum).
LIMIT_CEILING = 1000
#: The page size when the request names none (lowered to ``max_limit`` if that is smaller).
DEFAULT_LIMIT = 100


@dataclass(frozen=True, slots=True)
class QueryLimits:
    """The bounds one request must stay within (tests make smaller ones)."""

    max_range_ms: int = 31 * 86_400_000
    max_limit: int = LIMIT_CEILING
    latest_lookback_ms: int = 7 * 86_400_000
    max_scan_items: int = 100_000
    concurrency: int = 16
    max_query_calls: int = 200
    #: An aggregate's reads of one entity's compacted hours (docs/query.md, "Aggregates over compacted
    #: hours"): one Query of a few entities' blocks, half a read unit at the G ``tsctl plan`` gives, per cluster
    #: partition, an hour's with the hybrid layout's 1-hour buckets, so a 31-day range is 744 of them; the
    #: rest for continuation pages and the hours compacted under two G's. Not counted in ``max_query_calls``.
    max_compacted_calls: int = 1_000
    response_margin_ms: int = 2_000


@dataclass(frozen=True, slots=True)
class CursorSecretSource:
    """Where the cursor-signing key comes from: a Secrets Manager secret, or a literal."""

    secret_id: str | None
    literal: bytes | None
    #: How long the secret's keys are kept before they are read again (a cursor signed with a key not held
    #: yet makes them be read early, at most every 10 s); well under the rotation interval.
    ttl_ms: int = 300_000


class QuerySettings(CommonSettings):
    cursor_secret_arn: str | None = env("CURSOR_SECRET_ARN", None)
    """Secrets Manager secret (name or ARN) whose value signs pagination cursors (`AWSCURRENT`; `AWSPREVIOUS` is
    still accepted, so the key can rotate)."""
    cursor_secret_literal: str | None = env("CURSOR_SECRET", None)
    """The signing key itself (local mode, tests); at least 32 characters; used when no ARN is set."""

    @model_validator(mode="after")
    def _one_secret(self) -> Self:
        if self.cursor_secret_arn is None:
            literal = self.cursor_secret_literal
            self.check(
                literal is not None, "cursor_secret_arn", "is required (or CURSOR_SECRET, the key itself, outside AWS)"
            )
            self.check(
                len(literal or "") >= MIN_SECRET_CHARS,
                "cursor_secret_literal",
                f"must be at least {MIN_SECRET_CHARS} characters",
            )
        return self

    @property
    def cursor_secret(self) -> CursorSecretSource:
        if self.cursor_secret_arn is not None:
            return CursorSecretSource(secret_id=self.cursor_secret_arn, literal=None)
        return CursorSecretSource(secret_id=None, literal=(self.cursor_secret_literal or "").encode("utf-8"))
