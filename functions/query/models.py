"""Response bodies of the query API (pydantic, so the OpenAPI document shows them)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from query.params import Stat

#: What ends a page before ``limit`` readings (``ReadingsPage.cut_short_by``).
CutShort = Literal["deadline", "query_calls", "scan_items", "response_size"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Reading(_Model):
    """One reading, in the shape producers send it."""

    entity_id: str
    event_id: str
    timestamp: str = Field(description="Event time, UTC, fixed width: YYYY-MM-DDTHH:MM:SS.mmmZ")
    measures: dict[str, int | float] = Field(description="Only the projected measures when `measures` was given")
    dimensions: dict[str, str]


class ReadCost(_Model):
    """What the request read from DynamoDB."""

    partitions_planned: int = Field(description="Partitions the plan could have to query")
    partitions_queried: int = Field(description="Partitions actually opened (reads open them lazily, in order)")
    queries: int = Field(description="DynamoDB read calls made (Query; GetItem and BatchGetItem for rollups)")
    items_read: int = Field(
        description="Items DynamoDB evaluated (before filters such as TTL); each item is a block of readings"
    )
    read_units: float = Field(description="Read capacity consumed, as DynamoDB reported it")


class ReadingsPage(_Model):
    """One page of readings and the cursor of the next one."""

    entity_id: str | None = Field(description="The entity; null for a cross-entity read")
    from_: str = Field(serialization_alias="from", description="Start of the range (inclusive), UTC")
    to: str = Field(description="End of the range (exclusive), UTC")
    order: Literal["asc", "desc"]
    ordering: str = Field(description="How items are ordered within the range")
    count: int
    items: list[Reading]
    next_cursor: str | None = Field(
        description="Pass as `cursor`, with the same other parameters, for the next page; null on the last page"
    )
    complete: bool = Field(
        description="False when the page was cut short before `limit` readings (see `cut_short_by`); "
        "`next_cursor` then resumes exactly where it stopped"
    )
    cut_short_by: CutShort | None = Field(
        description="What ended a page cut short: the function's remaining time, MAX_QUERY_CALLS Query "
        "calls, MAX_SCAN_ITEMS readings decoded, or the response-size cap; null when the page is complete"
    )
    reached: str = Field(
        description="How far the read has got, UTC: every reading of [from, reached) (asc) or [reached, to) "
        "(desc) has been returned on this page or an earlier one"
    )
    cost: ReadCost


class LatestReading(_Model):
    """The most recent reading within the lookback window, or null."""

    entity_id: str
    searched_from: str = Field(description="Oldest instant searched (inclusive)")
    searched_to: str = Field(description="Newest instant searched (inclusive): the time of the request")
    reading: Reading | None
    cost: ReadCost


class Interval(_Model):
    start: str = Field(description="Start of the interval (aligned to the epoch, UTC)")
    readings: int = Field(description="Readings in the interval")
    measures: dict[str, dict[Stat, int | float]] = Field(
        description="Per measure, the statistics asked for; a measure absent from every reading of the "
        "interval is absent here"
    )
    set_aside: str | None = Field(
        default=None,
        description="From rollups only, and only when the rollup function could not compute or store a part "
        "of this interval (a block that does not decode, an item DynamoDB refused): why. The figures then "
        "leave that part out",
        exclude_if=lambda value: value is None,
    )


class AggregateSeries(_Model):
    """A downsampled series: one entry per interval that holds readings."""

    entity_id: str | None = Field(description="The entity; null for every entity (GET /aggregates)")
    from_: str = Field(serialization_alias="from")
    to: str
    interval: str
    stats: list[Stat]
    intervals: list[Interval]
    readings: int = Field(description="Readings aggregated (after removing expired readings and duplicates)")
    source: Literal["raw", "rollups", "rollups+raw"] = Field(
        description="Where the figures come from: rollups for the intervals they cover, raw readings after"
    )
    rollups_through: str | None = Field(
        description="Every reading stored before this instant is in the rollups and compaction's figures (null: "
        "no rollups); with the write tier it trails the clock by compaction's lag (about an hour). A reading "
        "stored later, even one for an earlier interval, appears after the rollup function's next run (a late "
        "reading of an hour compaction counted: after compaction's next run too)"
    )
    reached: str | None = Field(
        None,
        description="Every-entity aggregates only: the intervals of [from, reached) are answered; the later ones "
        "are not rolled up yet (reached = to when the whole range is)",
    )
    cost: ReadCost


class PlannedPartition(_Model):
    table: str
    pk: str
    sk_low: str | None
    sk_high: str | None
    from_: str = Field(serialization_alias="from")
    to: str
    time_filter: bool = Field(
        description="True when the time range cuts the partition (its readings outside it are dropped once decoded)"
    )
    kind: Literal["blocks", "group", "sub", "cluster", "compacted"] = Field(
        description="What the partition holds: blocks, the write tier's group items (many entities' readings of an "
        "hour), its sub-items (a sub-group of a group's re-packed 5-minute slices), its cluster blocks (a cluster of "
        "a group's entities' compacted hour), or compacted blocks (an entity's hour, compacted before cluster blocks)"
    )


class Explanation(_Model):
    """The plan of a read instead of its data (``explain=true``)."""

    route: str
    entity_id: str | None
    from_: str = Field(serialization_alias="from")
    to: str
    layout: str
    bucket: str
    table_period: str | None
    order: Literal["asc", "desc"]
    consistent: bool
    dedupe: bool = Field(description="True when copies of a reading can exist and are returned once")
    partition_count: int
    tables: list[str]
    partitions: list[PlannedPartition] = Field(description="The first 1,000 partitions, in plan order")
    partitions_truncated: bool
    minimum_read_units: float = Field(
        description="Every planned partition queried once and found empty (0.5 RCU per Query, 1 when consistent)"
    )
    estimated_read_units: float = Field(
        description="Minimum plus the readings the request returns (or, for aggregates, may read) "
        "at `nominal_item_bytes` of block each"
    )
    nominal_item_bytes: int = Field(
        description="Bytes of stored block assumed per reading (readings are stored many to a compressed item)"
    )
    source: Literal["raw", "rollups", "rollups+raw"] | None = Field(
        None, description="Aggregates only: where the figures would come from (the plan lists the raw part)"
    )
    source_reason: str | None = Field(None, description="Aggregates only: why that source")


class ErrorBody(_Model):
    """Every 4xx/5xx body: what is wrong, and which parameter (null when none)."""

    error: str
    parameter: str | None
