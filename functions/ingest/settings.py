"""Settings of the ingest Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings` (which holds ``MAX_AGE``, shared
with the rotator and the rollup function); docs/configuration.md lists every
variable (from the model).
"""

from __future__ import annotations

from typing import Self

from pydantic import model_validator

from adapters.settings import CommonSettings, deadline_margin, env


class IngestSettings(CommonSettings):
    rejects_queue_url: str = env("REJECTS_QUEUE_URL")
    """SQS queue (standard or FIFO) for readings never stored."""
    rotator_function: str | None = env("ROTATOR_FUNCTION", None)
    """The rotator (name or ARN) asked to build a missing period table (per-period tables); unset: never asked."""
    write_concurrency: int = env("WRITE_CONCURRENCY", 8, ge=1, le=32)
    """BatchWriteItem calls in flight at once."""
    reject_concurrency: int = env("REJECT_CONCURRENCY", 4, ge=1, le=16)
    """SendMessageBatch calls in flight at once."""
    deadline_margin_ms: int = deadline_margin(2_000, most_ms=60_000)
    retry_base_ms: int = env("RETRY_BASE_MS", 50, ge=1, le=10_000)
    """First backoff ceiling; doubles per retry, full jitter."""
    retry_max_delay_ms: int = env("RETRY_MAX_DELAY_MS", 5_000, ge=1, le=60_000)
    """Largest backoff ceiling."""
    reject_payload_bytes: int = env("REJECT_PAYLOAD_BYTES", 65_536, ge=1_024, le=131_072)
    """A rejected payload is cut past this many bytes."""

    @model_validator(mode="after")
    def _rules(self) -> Self:
        url = self.rejects_queue_url
        self.check(
            url.startswith(("https://", "http://")),
            "rejects_queue_url",
            f"{url!r} is not a queue URL (https://sqs.<region>...)",
        )
        self.check(
            self.retry_max_delay_ms >= self.retry_base_ms,
            "retry_max_delay_ms",
            f"{self.retry_max_delay_ms} is below RETRY_BASE_MS ({self.retry_base_ms})",
        )
        return self
