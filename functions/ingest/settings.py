"""Settings of the ingest Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings` (which holds ``MAX_AGE``, shared
with the rotator and the rollup function); docs/configuration.md lists every
variable (from the model). Its write and reject concurrency, backoff and deadline
margin are the adapters' defaults (``adapters.batch_writer``, ``adapters.rejects``,
``adapters.retry``): no deployment has needed others.
"""

from __future__ import annotations

from adapters.settings import CommonSettings, env


class IngestSettings(CommonSettings):
    rejects_queue_url: str = env("REJECTS_QUEUE_URL")
    """SQS queue (standard or FIFO) for readings never stored."""
    rotator_function: str | None = env("ROTATOR_FUNCTION", None)
    """The rotator (name or ARN) asked to build a missing period table (per-period tables); unset: never asked."""
