"""Settings of the rollup Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; ``ROLLUPS`` and
``CONTROL_TABLE`` are required here. docs/configuration.md lists every variable.

How late a mark may be applied is ``MAX_AGE`` (shared): ingest stores no reading
older, so every mark it writes is applied and the rollups stay equal to the raw
readings for every interval they answer.
"""

from __future__ import annotations

from typing import Self

from pydantic import model_validator

from adapters.settings import CommonSettings, DurationMs, env


class RollupSettings(CommonSettings):
    settle_ms: DurationMs = env("ROLLUP_SETTLE", "3m", gt=0)
    """How long after a slot (minute) of marks ends before it is applied; longer than ingest's timeout."""

    @model_validator(mode="after")
    def _needs_rollups(self) -> Self:
        self.check(self.granularities is not None, "rollups", "is required by the rollup function")
        self.check(self.control_table is not None, "control_table", "is required by the rollup function")
        return self
