"""Settings every handler shares, parsed from the environment at cold start.

A missing or malformed variable raises :class:`SettingsError` at import time
of the handler, naming the variable, so a misconfigured function fails its
first invocation loudly instead of writing to the wrong place.

=========================  ============================================  ===========
variable                   meaning                                       default
=========================  ============================================  ===========
``LAYOUT``                 random, calculated or hybrid                  hybrid
``SHARDS``                 global shard count N before any map change    (required)
``BUCKET``                 bucket granularity, e.g. 15m, 1h, 1d          1h
``TABLE_PREFIX``           readings table, or prefix of per-period ones  (required)
``TABLE_PERIOD``           hour, day, week, month, or empty              empty
``RETENTION``              how long readings are kept, e.g. 30d          30d
``CONTROL_TABLE``          shard-map table; empty = static map           empty
``SHARD_MAP_CACHE_TTL``    how long a process trusts its copy            60s
``GRACE``                  late writes a period's table takes after it   2h
                           ends (per-period tables only)
``PREBUILD_PERIODS``       periods the rotator builds ahead of the       2
                           current one (per-period tables only)
=========================  ============================================  ===========

``GRACE`` and ``PREBUILD_PERIODS`` are read by the rotator too, under the same
names, so ingest never writes to a table the rotator has not built or has
started to retire.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from keydesign import KeyDesignError, Layout, parse_duration


class SettingsError(ValueError):
    """An environment variable is missing or malformed."""

    def __init__(self, variable: str, reason: str) -> None:
        self.variable = variable
        super().__init__(f"environment variable {variable}: {reason}")


def required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise SettingsError(name, "is required")
    return value


def integer(env: Mapping[str, str], name: str, default: int | None, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        if default is None:
            raise SettingsError(name, "is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(name, f"{raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise SettingsError(name, f"{value} is outside {low}..{high}")
    return value


def duration_ms(env: Mapping[str, str], name: str, default: str) -> int:
    raw = env.get(name, "").strip() or default
    try:
        return parse_duration(raw, name)
    except KeyDesignError as exc:
        raise SettingsError(name, exc.reason) from None


@dataclass(frozen=True, slots=True)
class CommonSettings:
    layout: Layout
    shards: int
    retention_ms: int
    control_table: str | None
    shard_map_cache_ttl_ms: int
    grace_ms: int = 7_200_000
    prebuild_periods: int = 2

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CommonSettings:
        env = os.environ if env is None else env
        try:
            layout = Layout.from_settings(
                kind=env.get("LAYOUT", "").strip() or "hybrid",
                bucket=env.get("BUCKET", "").strip() or "1h",
                table_prefix=required(env, "TABLE_PREFIX"),
                table_period=env.get("TABLE_PERIOD", "").strip() or None,
            )
        except KeyDesignError as exc:
            variable = {"layout": "LAYOUT", "bucket": "BUCKET", "table_period": "TABLE_PERIOD"}.get(
                exc.field, "TABLE_PREFIX"
            )
            raise SettingsError(variable, exc.reason) from None
        return cls(
            layout=layout,
            shards=integer(env, "SHARDS", None, 1, 9_999),
            retention_ms=duration_ms(env, "RETENTION", "30d"),
            control_table=env.get("CONTROL_TABLE", "").strip() or None,
            shard_map_cache_ttl_ms=duration_ms(env, "SHARD_MAP_CACHE_TTL", "60s"),
            grace_ms=duration_ms(env, "GRACE", "2h"),
            prebuild_periods=integer(env, "PREBUILD_PERIODS", 2, 1, 366),
        )
