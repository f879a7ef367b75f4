"""Capacity arithmetic: shards, sub-shards, table period and monthly cost.

The limits used (DynamoDB documentation): one partition key takes at most
1,000 write units/s and 3,000 read units/s; a physical partition holds 10 GB
(taken here as 10 GiB); a write unit is 1 KB, a read unit 4 KB.

Default prices are AWS's published us-east-1 list prices for the Standard
table class as of November 2024 (on-demand writes were halved then): on-demand
$0.625 per million write request units and $0.125 per million read request
units; provisioned $0.00065 per WCU-hour and $0.00013 per RCU-hour; storage
$0.25 per GB-month. Prices differ by region and change: pass your own.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .errors import InvalidInput
from .items import READ_UNIT_BYTES, write_units
from .periods import PERIODS

PARTITION_WCU = 1_000
PARTITION_RCU = 3_000
PARTITION_BYTES = 10 * 1024**3
#: Bytes DynamoDB adds to each item for storage billing (index overhead).
STORAGE_OVERHEAD_BYTES = 100
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600


@dataclass(frozen=True, slots=True)
class Prices:
    """List prices in USD; the defaults are us-east-1, November 2024."""

    ondemand_write_per_million: float = 0.625
    ondemand_read_per_million: float = 0.125
    provisioned_wcu_hour: float = 0.00065
    provisioned_rcu_hour: float = 0.00013
    storage_gb_month: float = 0.25


@dataclass(frozen=True, slots=True)
class Workload:
    """A described workload. Rates are per second; sizes are DynamoDB item bytes."""

    peak_writes_per_s: float
    item_bytes: int
    avg_writes_per_s: float | None = None
    entities: int | None = None
    hot_entities: dict[str, float] = field(default_factory=dict)
    reads_per_s: float = 0.0
    items_per_read: float = 1.0
    retention_days: float = 30.0
    utilisation: float = 0.5
    partition_headroom: float = 0.05

    def validate(self) -> None:
        """Raise :class:`InvalidInput` naming the first impossible figure."""
        # Infinity passes the comparisons below and then breaks math.ceil in plan_capacity.
        finite = math.isfinite
        checks: list[tuple[str, bool, str]] = [
            ("peak_writes_per_s", finite(self.peak_writes_per_s) and self.peak_writes_per_s > 0, "must be above 0"),
            ("item_bytes", 1 <= self.item_bytes <= 400 * 1024, "must be 1 .. 409,600 bytes (DynamoDB's item limit)"),
            ("entities", self.entities is None or self.entities >= 1, "must be at least 1"),
            ("utilisation", 0 < self.utilisation <= 1, "must be in (0, 1]"),
            ("partition_headroom", 0 <= self.partition_headroom < 1, "must be in [0, 1)"),
            ("reads_per_s", finite(self.reads_per_s) and self.reads_per_s >= 0, "must not be negative"),
            ("items_per_read", finite(self.items_per_read) and self.items_per_read > 0, "must be above 0"),
            ("retention_days", finite(self.retention_days) and self.retention_days > 0, "must be above 0"),
        ]
        if self.avg_writes_per_s is not None:
            checks.append(
                ("avg_writes_per_s", 0 < self.avg_writes_per_s <= self.peak_writes_per_s, "must be in (0, peak]")
            )
        for entity, rate in self.hot_entities.items():
            checks.append((f"hot_entities.{entity}", 0 < rate <= self.peak_writes_per_s, "must be in (0, peak]"))
        for name, ok, reason in checks:
            if not ok:
                raise InvalidInput(name, reason)


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """What :func:`plan_capacity` recommends, with the figures behind it."""

    wcu_per_item: int
    peak_wcu: float
    key_budget_wcu: float
    global_shards: int
    load_per_shard_wcu: float
    entity_shards: dict[str, int]
    fill_hours: float
    table_period: str | None
    monthly_cost_ondemand: float
    monthly_cost_provisioned: float
    monthly_storage_gb: float
    notes: list[str]

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def shards_for(wcu: float, utilisation: float) -> int:
    """Partition keys needed so that ``wcu`` runs each key at or under ``utilisation`` of 1,000 WCU."""
    return max(1, math.ceil(wcu / (PARTITION_WCU * utilisation) - 1e-9))


def fill_hours(bytes_per_s: float, headroom: float) -> float:
    """Hours until a partition written at ``bytes_per_s`` fills 10 GiB less ``headroom``."""
    return PARTITION_BYTES * (1 - headroom) / bytes_per_s / 3600


def choose_period(hours: float) -> str | None:
    """The longest table period that fills no partition: a month counts as 31 days."""
    lengths = {"hour": 1, "day": 24, "week": 168, "month": 744}
    fitting = [p for p in PERIODS if lengths[p] <= hours]
    return fitting[-1] if fitting else None


def plan_capacity(workload: Workload, prices: Prices | None = None) -> CapacityPlan:
    """Size the hybrid layout (global N, hot-entity sub-shards), the table period and the cost."""
    workload.validate()
    prices = prices or Prices()
    wcu_item = write_units(workload.item_bytes)
    budget = PARTITION_WCU * workload.utilisation
    peak_wcu = workload.peak_writes_per_s * wcu_item
    hot_total = sum(workload.hot_entities.values()) * wcu_item
    notes: list[str] = []

    # The hot entities get their own partitions; the rest is spread by hash.
    entity_shards = {e: shards_for(rate * wcu_item, workload.utilisation) for e, rate in workload.hot_entities.items()}
    spread_wcu = max(peak_wcu - hot_total, 0.0)
    global_shards = shards_for(spread_wcu, workload.utilisation)
    load_per_shard = spread_wcu / global_shards
    for entity, subs in entity_shards.items():
        if subs == 1 and workload.hot_entities[entity] * wcu_item + load_per_shard > budget:
            entity_shards[entity] = 2
            notes.append(f"{entity}: split in 2 so it does not push its base shard over the budget")
    others = (workload.entities or 0) - len(workload.hot_entities)
    typical_entity_wcu = spread_wcu / others if others > 0 else 0.0
    if typical_entity_wcu > budget:
        notes.append(
            f"a typical entity writes {typical_entity_wcu:.0f} WCU/s, over the {budget:.0f} WCU/s key budget: "
            "every entity needs sub-shards; consider the calculated layout"
        )

    # Table period: the guide's 10 GB rule, per physical partition.
    partitions = max(1, math.ceil(peak_wcu / PARTITION_WCU), global_shards + sum(entity_shards.values()))
    avg_writes = workload.avg_writes_per_s or workload.peak_writes_per_s
    per_partition_bytes_s = avg_writes * workload.item_bytes / partitions
    hours = fill_hours(per_partition_bytes_s, workload.partition_headroom)
    period = choose_period(hours)
    if period is None:
        notes.append(f"one partition fills in {hours:.2f} h: even hourly tables would split; shard further")

    # Cost per month.
    stored_bytes = avg_writes * (workload.item_bytes + STORAGE_OVERHEAD_BYTES) * workload.retention_days * 86_400
    storage_gb = stored_bytes / 1024**3
    read_units_each = max(1, math.ceil(workload.items_per_read * workload.item_bytes / READ_UNIT_BYTES)) / 2
    ondemand = (
        avg_writes * wcu_item * SECONDS_PER_MONTH / 1e6 * prices.ondemand_write_per_million
        + workload.reads_per_s * read_units_each * SECONDS_PER_MONTH / 1e6 * prices.ondemand_read_per_million
    )
    provisioned = (
        math.ceil(peak_wcu) * HOURS_PER_MONTH * prices.provisioned_wcu_hour
        + math.ceil(workload.reads_per_s * read_units_each) * HOURS_PER_MONTH * prices.provisioned_rcu_hour
    )
    storage_cost = storage_gb * prices.storage_gb_month
    return CapacityPlan(
        wcu_per_item=wcu_item,
        peak_wcu=peak_wcu,
        key_budget_wcu=budget,
        global_shards=global_shards,
        load_per_shard_wcu=round(load_per_shard, 1),
        entity_shards=entity_shards,
        fill_hours=round(hours, 2),
        table_period=period,
        monthly_cost_ondemand=round(ondemand + storage_cost, 2),
        monthly_cost_provisioned=round(provisioned + storage_cost, 2),
        monthly_storage_gb=round(storage_gb, 1),
        notes=notes,
    )


def key_load(writes_per_s: float, shards: int, item_bytes: int) -> float:
    """WCU/s on each of ``shards`` keys sharing ``writes_per_s`` evenly."""
    return writes_per_s * write_units(item_bytes) / shards
