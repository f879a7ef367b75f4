"""Printing for commands: aligned tables for people, JSON for machines."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any, TextIO


def emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


class StatusLine:
    """Progress on a stream: one line rewritten in place on a terminal (at most every 0.2 s), a new
    line every ``every_s`` otherwise, so a log file is not flooded."""

    def __init__(self, stream: TextIO, every_s: float = 5.0) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._every = 0.2 if self._tty else every_s
        self._last = float("-inf")
        self.started = time.monotonic()

    def show(self, line: str, *, final: bool) -> None:
        now = time.monotonic()
        if not final and now - self._last < self._every:
            return
        self._last = now
        self._stream.write("\r" + line + ("\n" if final else "") if self._tty else line + "\n")
        self._stream.flush()


def table(rows: Sequence[Sequence[object]], headers: Sequence[str] | None = None) -> str:
    """Aligned columns: numbers to the right, everything else to the left."""
    cells = [[(_fmt(c), _is_number(c)) for c in row] for row in rows]
    if headers:
        cells.insert(0, [(h, False) for h in headers])
    if not cells:
        return ""
    widths = [max(len(row[i][0]) for row in cells) for i in range(len(cells[0]))]
    lines = [
        "  ".join(
            text.rjust(w) if right else text.ljust(w) for (text, right), w in zip(row, widths, strict=True)
        ).rstrip()
        for row in cells
    ]
    if headers:
        lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
