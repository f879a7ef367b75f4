"""Settings of the compaction Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; ``WRITE_TIER_GROUPS`` (above 0) and
``CONTROL_TABLE`` (the watermark's table) are required here. docs/configuration.md lists every
variable.
"""

from __future__ import annotations

from typing import Self

from pydantic import model_validator

from adapters.settings import CommonSettings, DurationMs, env


class CompactionSettings(CommonSettings):
    settle_ms: DurationMs = env("COMPACTION_SETTLE", "3m", gt=0)
    """How long after an hour ends before it is compacted; longer than ingest's timeout."""

    @model_validator(mode="after")
    def _needs_the_write_tier(self) -> Self:
        self.check(self.write_tier is not None, "write_tier_groups", "must be above 0 for the compaction function")
        self.check(self.control_table is not None, "control_table", "is required by the compaction function")
        return self
