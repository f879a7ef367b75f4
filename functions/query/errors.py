"""Domain errors of the query Lambda. ``api.py`` maps each to an HTTP status in one place.

* :class:`keydesign.InvalidInput` (and :class:`query.cursor.CursorError`): 400,
  naming the parameter;
* :class:`ScanLimitExceeded`: 413, the request is valid but would read more
  than a request may; narrow the range;
* :class:`UnsupportedByLayout`: 400, the deployment's key layout cannot answer
  this kind of read at all.
"""

from __future__ import annotations


class ScanLimitExceeded(Exception):  # noqa: N818 - reads as the condition
    """A request would decode more readings (``MAX_SCAN_ITEMS``), make more Query calls
    (``MAX_QUERY_CALLS``) or take longer than one request may."""

    def __init__(self, parameter: str, reason: str) -> None:
        self.parameter = parameter
        self.reason = reason
        super().__init__(f"{parameter}: {reason}")


class UnsupportedByLayout(Exception):  # noqa: N818 - reads as the condition
    """The configured key layout cannot serve this route (not the caller's input)."""
