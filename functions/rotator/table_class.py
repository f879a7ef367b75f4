"""When a closed table moves to the Standard-IA table class: when storage dominates what it costs.

Standard-IA stores for 60% less than Standard and charges 25% more per request.
Moving pays when what it saves on storage beats what it adds on requests:
``0.60 x storage > 0.25 x requests``, i.e. when the table's storage costs more
than 5/12 (42%) of its requests, both at Standard prices. A closed table takes
no writes but late ones, so its requests are mostly its reads.

The rotator measures both over the day before it reviews a closed table (the
first review a day after the table closed; a table left Standard is reviewed
again whenever a run looks at it): its size (TableSizeBytes) and the read and
write units it consumed (CloudWatch), scaled to a month. It moves the table
when storage costs at least
``INFREQUENT_ACCESS_STORAGE_PERCENT`` of requests (the stack's default, 50,
keeps a margin over 42 for a day's sample standing for the month). The prices
below are DynamoDB's us-east-1 on-demand list prices; only their ratios enter
the rule. Pure: nothing here calls AWS.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
MONTH_MS = 30 * 86_400_000
#: USD, Standard table class, on-demand (us-east-1 list prices).
STORAGE_PER_GIB_MONTH = 0.25
WRITE_PER_MILLION_UNITS = 0.625
READ_PER_MILLION_UNITS = 0.125


@dataclass(frozen=True, slots=True)
class Usage:
    """What a table consumed over ``window_ms``."""

    read_units: float
    write_units: float
    window_ms: int


def monthly_storage_usd(size_bytes: int) -> float:
    return size_bytes / GIB * STORAGE_PER_GIB_MONTH


def monthly_requests_usd(usage: Usage) -> float:
    per_window = (usage.read_units * READ_PER_MILLION_UNITS + usage.write_units * WRITE_PER_MILLION_UNITS) / 1e6
    return per_window * MONTH_MS / usage.window_ms


def storage_dominates(size_bytes: int, usage: Usage, min_storage_percent: int) -> bool:
    """True when the table's storage costs at least ``min_storage_percent`` of its requests
    (a table nobody reads or writes: always)."""
    return monthly_storage_usd(size_bytes) * 100 >= min_storage_percent * monthly_requests_usd(usage)
