"""Settings of the compaction Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; ``WRITE_TIER_GROUPS`` (above 0) and
``CONTROL_TABLE`` (the watermark's table) are required here. With ``ROLLUPS`` compaction puts its
part of the rollups (``compaction.logic``): each granularity must divide an hour or be whole hours,
and the finest must be an hour or less. docs/configuration.md lists every variable.
"""

from __future__ import annotations

from typing import Self

from pydantic import model_validator

from adapters.settings import CommonSettings, DurationMs, env
from keydesign import ConfigError
from keydesign.rollup import HOUR_MS


class CompactionSettings(CommonSettings):
    settle_ms: DurationMs = env("COMPACTION_SETTLE", "3m", gt=0)
    """How long after an hour ends before it is compacted; longer than ingest's timeout."""

    @model_validator(mode="after")
    def _needs_the_write_tier(self) -> Self:
        self.check(self.write_tier is not None, "write_tier_groups", "must be above 0 for the compaction function")
        self.check(self.control_table is not None, "control_table", "is required by the compaction function")
        if self.granularities is not None:
            try:
                self.granularities.check_hour_aligned("rollups")
            except ConfigError as exc:
                raise self.invalid("rollups", exc.reason) from None
            self.check(
                self.granularities.finest <= HOUR_MS,
                "rollups",
                "the finest granularity must be an hour or less with the write tier (compaction's partials hold "
                "a group's hour)",
            )
        return self
