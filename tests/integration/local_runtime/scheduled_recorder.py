"""A stand-in for the rotator: records the event of every scheduled run (in ``recordings``, which is
not re-imported when this handler module is)."""

from __future__ import annotations

from typing import Any

from tests.integration.local_runtime import recordings


def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
    with recordings.LOCK:
        recordings.SCHEDULED.append(event)
        if len(recordings.SCHEDULED) >= 3:
            recordings.THREE_RUNS.set()
        return {"runs": len(recordings.SCHEDULED)}
