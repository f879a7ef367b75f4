"""Printing for commands: aligned tables for people, JSON for machines."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO


def emit_json(data: Any, stream: TextIO | None = None) -> None:
    json.dump(data, stream or sys.stdout, indent=2, sort_keys=False, default=str)
    (stream or sys.stdout).write("\n")


def table(rows: Sequence[Sequence[object]], headers: Sequence[str] | None = None) -> str:
    """Aligned columns: numbers to the right, everything else to the left."""
    body = [[(_fmt(c), _is_number(c)) for c in row] for row in rows]
    head = [(h, False) for h in headers] if headers else None
    every = ([head] if head else []) + body
    if not every:
        return ""
    widths = [max(len(row[i][0]) for row in every) for i in range(len(every[0]))]
    lines = []
    for row in every:
        cells = [text.rjust(w) if right else text.ljust(w) for (text, right), w in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
        if head is not None and row is head:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)
