"""What the stream recorder saw (kept here because the recorder's module is imported afresh per system)."""

from __future__ import annotations

import threading
from typing import Any

LOCK = threading.Lock()
SEEN: list[dict[str, Any]] = []
FAILED_ONCE: set[str] = set()
TO_FAIL: set[str] = set()


def clear() -> None:
    with LOCK:
        SEEN.clear()
        FAILED_ONCE.clear()
        TO_FAIL.clear()
        SCHEDULED.clear()
        THREE_RUNS.clear()


SCHEDULED: list[dict[str, Any]] = []
THREE_RUNS = threading.Event()
