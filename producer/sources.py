"""Readings from JSON Lines or CSV.

JSON Lines: one reading object per line (blank lines are skipped).

CSV: a header row naming the columns ``entity_id``, ``timestamp``, optional
``event_id``, and one column per measure (``measures.<name>``) or dimension
(``dimensions.<name>``); an empty cell leaves that measure or dimension out.
A timestamp of digits only is epoch milliseconds, anything else is RFC 3339.

A line that cannot be read becomes a :class:`SourceItem` with an ``error``
(the caller counts and reports it) so one bad line never stops a file; a
header that cannot be understood stops it at once with :class:`InputError`.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

_INT = re.compile(r"^[+-]?\d+\Z")


class InputError(ValueError):
    """The input as a whole cannot be read (for example a CSV header)."""


@dataclass(frozen=True, slots=True)
class SourceItem:
    """One input line: a reading object, or why it is not one."""

    line: int
    reading: dict[str, Any] | None
    error: str | None = None


def read_jsonl(stream: IO[str]) -> Iterator[SourceItem]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            yield SourceItem(number, None, f"line {number}: not JSON ({exc})")
            continue
        if not isinstance(value, dict):
            yield SourceItem(number, None, f"line {number}: expected a JSON object, got {type(value).__name__}")
            continue
        yield SourceItem(number, value)


def read_csv(stream: IO[str]) -> Iterator[SourceItem]:
    reader = csv.reader(stream)
    try:
        header = next(reader)
    except StopIteration:
        return
    columns = _columns(header)
    for row in reader:
        number = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield SourceItem(number, None, f"line {number}: {len(row)} cells, the header has {len(header)}")
            continue
        try:
            yield SourceItem(number, _reading(columns, row))
        except ValueError as exc:
            yield SourceItem(number, None, f"line {number}: {exc}")


def _columns(header: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    for raw in header:
        name = raw.strip()
        if name in ("entity_id", "timestamp", "event_id"):
            out.append((name, None))
            continue
        group, dot, key = name.partition(".")
        if dot and group in ("measures", "dimensions") and key:
            out.append((group, key))
            continue
        raise InputError(
            f"CSV column {name!r} is not entity_id, timestamp, event_id, measures.<name> or dimensions.<name>"
        )
    names = [c[0] for c in out]
    for required in ("entity_id", "timestamp"):
        if required not in names:
            raise InputError(f"the CSV header has no {required} column")
    return out


def _reading(columns: list[tuple[str, str | None]], row: list[str]) -> dict[str, Any]:
    reading: dict[str, Any] = {}
    measures: dict[str, int | float] = {}
    dimensions: dict[str, str] = {}
    for (group, key), cell in zip(columns, row, strict=True):
        value = cell.strip()
        if key is None:
            if group == "timestamp" and _INT.match(value):
                reading[group] = int(value)
            elif value:
                reading[group] = value
        elif not value:
            continue
        elif group == "measures":
            try:
                measures[key] = int(value) if _INT.match(value) else float(value)
            except ValueError:
                raise ValueError(f"measures.{key}: {value!r} is not a number") from None
        else:
            dimensions[key] = value
    reading["measures"] = measures
    if dimensions:
        reading["dimensions"] = dimensions
    return reading
