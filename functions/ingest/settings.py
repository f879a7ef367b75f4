"""Settings of the ingest Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings` (LAYOUT, SHARDS, BUCKET,
TABLE_PREFIX, TABLE_PERIOD, RETENTION, CONTROL_TABLE, SHARD_MAP_CACHE_TTL):

=========================  ==========================================================  ==============
variable                   meaning                                                     default
=========================  ==========================================================  ==============
``REJECTS_QUEUE_URL``      SQS queue (standard or FIFO) for readings never stored      (required)
``MAX_FUTURE``             how far past now an event time may lie                      5m
``MAX_AGE``                how far before now an event time may lie (<= RETENTION)     RETENTION
``WRITE_CONCURRENCY``      BatchWriteItem calls in flight at once (1..32)              8
``REJECT_CONCURRENCY``     SendMessageBatch calls in flight at once (1..16)            4
``DEADLINE_MARGIN_MS``     time kept back from the Lambda timeout for the response     2000
``RETRY_BASE_MS``          first backoff ceiling; doubles per retry, full jitter       50
``RETRY_MAX_DELAY_MS``     largest backoff ceiling                                     5000
``REJECT_PAYLOAD_BYTES``   a rejected payload is cut past this many bytes              65536
=========================  ==========================================================  ==============

``MAX_AGE`` may not exceed ``RETENTION``: an older reading would be stored
already expired (single table) or routed to a table already dropped (per
period), which would retry forever.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from adapters.settings import CommonSettings, SettingsError, duration_ms, integer, required


@dataclass(frozen=True, slots=True)
class IngestSettings:
    common: CommonSettings
    rejects_queue_url: str
    max_future_ms: int
    max_age_ms: int
    write_concurrency: int
    reject_concurrency: int
    deadline_margin_ms: int
    retry_base_ms: int
    retry_max_delay_ms: int
    reject_payload_bytes: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> IngestSettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        queue_url = required(env, "REJECTS_QUEUE_URL")
        if not queue_url.startswith(("https://", "http://")):
            raise SettingsError("REJECTS_QUEUE_URL", f"{queue_url!r} is not a queue URL (https://sqs.<region>...)")
        max_age = duration_ms(env, "MAX_AGE", "") if env.get("MAX_AGE", "").strip() else common.retention_ms
        if max_age > common.retention_ms:
            raise SettingsError(
                "MAX_AGE",
                "must not exceed RETENTION: an older reading would be stored already expired "
                "or routed to a table already dropped",
            )
        retry_base = integer(env, "RETRY_BASE_MS", 50, 1, 10_000)
        retry_max = integer(env, "RETRY_MAX_DELAY_MS", 5_000, 1, 60_000)
        if retry_max < retry_base:
            raise SettingsError("RETRY_MAX_DELAY_MS", f"{retry_max} is below RETRY_BASE_MS ({retry_base})")
        return cls(
            common=common,
            rejects_queue_url=queue_url,
            max_future_ms=duration_ms(env, "MAX_FUTURE", "5m"),
            max_age_ms=max_age,
            write_concurrency=integer(env, "WRITE_CONCURRENCY", 8, 1, 32),
            reject_concurrency=integer(env, "REJECT_CONCURRENCY", 4, 1, 16),
            deadline_margin_ms=integer(env, "DEADLINE_MARGIN_MS", 2_000, 0, 60_000),
            retry_base_ms=retry_base,
            retry_max_delay_ms=retry_max,
            reject_payload_bytes=integer(env, "REJECT_PAYLOAD_BYTES", 65_536, 1_024, 131_072),
        )
