"""Settings of the ingest Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings` (which holds ``MAX_AGE``, shared
with the rotator and the rollup function); docs/configuration.md lists every
variable (from the model). Its write and reject concurrency, backoff and deadline
margin are the adapters' defaults (``adapters.batch_writer``, ``ingest.rejects``,
``adapters.retry``): no deployment has needed others.

The last four say which agents' formats ingest reads beside its own JSON and how
their metrics become readings (``ingest.formats``, docs/ingest.md "Agents").
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated

from pydantic import AfterValidator

from adapters.settings import CommonSettings, env
from ingest.formats import AGENT_FORMATS, INFLUX_PRECISIONS, TELEGRAF_JSON_UNITS, Formats


def _names(allowed: tuple[str, ...] | None, what: str) -> AfterValidator:
    """A comma-separated list (``none``: empty), each entry one of ``allowed`` (any name when None)."""

    def check(value: str) -> str:
        entries = [] if value.strip().lower() == "none" else [e.strip() for e in value.split(",")]
        if not entries and allowed is None:
            raise ValueError("must name at least one tag or attribute")
        for entry in entries:
            if not entry or (allowed is not None and entry not in allowed):
                expected = ", ".join(allowed) if allowed else "a name"
                raise ValueError(f"{entry!r} is not {what}; expected a comma-separated list of {expected}")
        return value

    return AfterValidator(check)


def _one_of(allowed: tuple[str, ...]) -> AfterValidator:
    def check(value: str) -> str:
        if value not in allowed:
            raise ValueError(f"{value!r} is not one of {', '.join(allowed)}")
        return value

    return AfterValidator(check)


class IngestSettings(CommonSettings):
    rejects_queue_url: str = env("REJECTS_QUEUE_URL")
    """SQS queue (standard or FIFO) for readings never stored."""
    rotator_function: str | None = env("ROTATOR_FUNCTION", None)
    """The rotator (name or ARN) asked to build a missing period table (per-period tables); unset: never asked."""
    ingest_formats: Annotated[str, _names(AGENT_FORMATS, "an agent format")] = env(
        "INGEST_FORMATS", ",".join(AGENT_FORMATS)
    )
    """Agents' formats read beside ingest's JSON and KPL aggregates (comma-separated; none: only ingest's JSON)."""
    entity_tags: Annotated[str, _names(None, "a tag or attribute name")] = env(
        "ENTITY_TAGS", "host,service.instance.id"
    )
    """Tags / attributes naming an agent's reading's entity, in order: the first one present is the entity."""
    influx_precision: Annotated[str, _one_of(tuple(INFLUX_PRECISIONS))] = env("INFLUX_PRECISION", "ns")
    """Unit of line-protocol timestamps: ns (Telegraf's), us, ms or s."""
    telegraf_json_timestamp_units: Annotated[str, _one_of(tuple(TELEGRAF_JSON_UNITS))] = env(
        "TELEGRAF_JSON_TIMESTAMP_UNITS", "1s"
    )
    """Unit of Telegraf JSON timestamps, as Telegraf's json_timestamp_units (1ns to 1s, powers of ten)."""

    @cached_property
    def formats(self) -> Formats:
        """What the four settings above say, as the decoders take it."""
        enabled = "" if self.ingest_formats.strip().lower() == "none" else self.ingest_formats
        return Formats(
            enabled=frozenset(e.strip() for e in enabled.split(",") if e.strip()),
            entity_tags=tuple(t.strip() for t in self.entity_tags.split(",")),
            influx_unit_ns=INFLUX_PRECISIONS[self.influx_precision],
            telegraf_json_unit_ns=TELEGRAF_JSON_UNITS[self.telegraf_json_timestamp_units],
        )
