"""A Python client for the query API (``QueryClient``) with typed results.

* :mod:`.api_client`  requests (SigV4-signed for the deployed API), retries, pages as iterators
* :mod:`.results`     the typed results and :class:`ApiError`

``tsctl query`` is the command line over this package; docs/client.md shows both.
"""

from .api_client import QueryClient, ReadingStream, format_time, resolve_stack_outputs
from .results import (
    AggregateSeries,
    ApiError,
    Explanation,
    Interval,
    LatestResult,
    ReadCost,
    Reading,
    ReadingsPage,
    flat_reading,
    readings_dataframe,
)

__all__ = [
    "AggregateSeries",
    "ApiError",
    "Explanation",
    "Interval",
    "LatestResult",
    "QueryClient",
    "ReadCost",
    "Reading",
    "ReadingStream",
    "ReadingsPage",
    "flat_reading",
    "format_time",
    "readings_dataframe",
    "resolve_stack_outputs",
]
