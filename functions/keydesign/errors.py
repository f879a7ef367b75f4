"""Errors raised by the key-design layer.

Every problem with *input* (a reading, a timestamp, a query range) raises
:class:`InvalidInput`; every problem with *configuration* (a layout, a shard
map) raises :class:`ConfigError`. Both name the offending field so that a
caller can map them to a rejects-queue reason or an HTTP 400 without parsing
the message.
"""

from __future__ import annotations


class KeyDesignError(ValueError):
    """Base class of every error this package raises on purpose."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class InvalidInput(KeyDesignError):  # noqa: N818 - the name reads as the condition
    """A reading, timestamp or query argument is not acceptable.

    ``field`` names the offending field (for example ``entity_id`` or
    ``measures.temp``) and ``reason`` says what is wrong with it.
    """


class ConfigError(KeyDesignError):
    """A layout, bucket, period or shard-map setting is not acceptable."""
