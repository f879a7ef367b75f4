"""The demo's report, its checks, its summary and its two pictures, from what was observed (no AWS calls:
the unit tests feed it by hand). docs/local.md ("The report") says what each field holds."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from infra.config import Context
from keydesign import (
    Layout,
    Reading,
    ShardMap,
    decode_block,
    format_ts,
    item_size,
    parse_timestamp,
    ttl_for,
    write_units,
)
from keydesign.blocks import block_item, decode_group
from keydesign.capacity import PARTITION_WCU, STORAGE_OVERHEAD_BYTES
from keydesign.layouts import key_family, parse_keys
from keydesign.legacy import legacy_item
from keydesign.periods import format_duration, table_head
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    COMPACTED_PK_SUFFIX,
    DENSE_MARK_PREFIX,
    GROUP_PK_PREFIX,
    MAX_COMPACTED_SPAN_MS,
    REPACK_MS,
    SUB_PK_PREFIX,
    WriteTier,
)
from keydesign.writetier import SLICE_MS as HOUR_MS

HOT_SENSOR = "sensor-alpha-001"
NOT_RUN = "not run"
SLICE_MS = 5 * 60_000  # the table-writes picture counts readings per 5 minutes of event time
OTHERS = "every other key (peak)"
LOAD_BASIS = "each block's write units at the second of its first reading"
Copies = dict[tuple[str, int, str], tuple[int, Reading, "Block"]]


#: The sparse fleet: its entities' names, and its phase in the ledger.
SPARSE_PREFIX = "sparse-"
SPARSE_PHASE = "sparse fleet"
#: The fleet shapes the cost is reported for (``shape_of``), and the tiers of what is stored (``TIERS``).
DENSE, HOT, SPARSE = "dense sensors", "hot sensor", SPARSE_PHASE
GROUP_ITEMS, SUB_ITEMS, COMPACTED, BLOCKS, DENSE_MARKS, ROLLUPS, CONTROL = (
    "group items",
    "sub-items",
    "compacted blocks",
    "entity blocks",
    "dense marks",
    "rollup items",
    "control items",
)
TIERS = (GROUP_ITEMS, SUB_ITEMS, COMPACTED, BLOCKS, DENSE_MARKS, ROLLUPS, CONTROL)
#: The tiers that hold readings (and the dense marks that go with them): what ingest and compaction write.
READING_TIERS = (GROUP_ITEMS, SUB_ITEMS, COMPACTED, BLOCKS, DENSE_MARKS)
#: The sparse fleet's write units a reading in READING_TIERS must stay under. Measured in the demo at 0.47-0.68
#: (docs/local.md, "Measured"): its group items about 0.18, its compacted blocks 0.25-0.5, since the demo's
#: 1-minute buckets cut a compacted block at each minute (an entity's 4 readings make one or two, by where in a
#: minute the fleet starts), not at its hour as the stack's 1-hour bucket would. One item per reading is 1.
SPARSE_WRITE_UNITS_BOUND = 0.8
#: Rollup items in the control table, by partition key prefix (``keydesign.rollup``); the rest is control.
ROLLUP_PK_PREFIXES = ("rollmark#", "rollup#", "rollall#", "rollgrp#", "compactredo#")


def shape_of(entity: str) -> str | None:
    """The fleet shape an entity belongs to; None for the agents' few entities."""
    if entity == HOT_SENSOR:
        return HOT
    if entity.startswith(SPARSE_PREFIX):
        return SPARSE
    return DENSE if entity.startswith("sensor-") else None


#: The ledger's phase of the readings published through an agent's format: ``agent format <format>``.
AGENT_PHASE = "agent format "
#: Telegraf's metric name for them: their measure ``temp`` is stored as ``env_temp``.
AGENT_MEASUREMENT = "env"


def not_run(reason: str) -> dict[str, Any]:
    return {"status": NOT_RUN, "reason": reason}


def shard_map(item: Mapping[str, Any]) -> ShardMap:
    """The map of the control table's shard-map item (deserialised)."""
    return ShardMap.from_dict(json.loads(str(item["map"])))


@dataclass(frozen=True, slots=True)
class Block:
    """One stored block, decoded: where it is, what a put of it is billed, its version and readings."""

    table: str
    pk: str
    write_units: int
    size: int
    version: int
    readings: tuple[Reading, ...]

    @property
    def first_ms(self) -> int:
        return self.readings[0].ts_ms

    @property
    def entity(self) -> str:
        return self.readings[0].entity_id

    @classmethod
    def from_item(cls, table: str, item: Mapping[str, Any], layout: Layout) -> Block | None:
        """From an item as a DynamoDB client returns it: a block, a write-tier group item (its readings
        are many entities') or a compacted block; None for a dense mark (no readings). ValueError when
        it is none of these."""
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        if sk.startswith(DENSE_MARK_PREFIX):
            return None
        payload = item["b"]["B"]
        size = item_size(block_item(pk, sk, payload, int(item["ttl"]["N"]) if "ttl" in item else None))
        units = int(sk.rsplit("#", 1)[-1])
        if pk.startswith(GROUP_PK_PREFIX):
            header, readings = decode_group(payload)
        elif pk.startswith(SUB_PK_PREFIX):  # copies of group items' readings, re-packed by compaction
            header, readings = decode_group(payload, span_limit_ms=REPACK_MS)
        elif pk.startswith(CLUSTER_PK_PREFIX):  # a cluster of a group's entities, compacted
            header, readings = decode_group(payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        elif pk.endswith(COMPACTED_PK_SUFFIX):
            entity = sk.split("#", 1)[0] if layout.can.shared_partitions else pk.removesuffix(COMPACTED_PK_SUFFIX)
            header, readings = decode_block(entity, payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        elif (parts := parse_keys(pk, sk, layout.kind)) is not None:
            header, readings = decode_block(parts.entity, payload)
        else:
            raise ValueError(f"{table}: {pk} / {sk} is not a block's key")
        return cls(table, pk, units, size, header.version, tuple(readings))


@dataclass(frozen=True, slots=True)
class Item:
    """A stored item that holds no reading (a dense mark, a control table item): its keys and size."""

    pk: str
    sk: str
    size: int

    @property
    def write_units(self) -> int:
        return write_units(self.size)

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> Item:
        """From an item as a DynamoDB client returns it, sized by DynamoDB's rules (``keydesign.item_size``)."""
        return cls(item["pk"]["S"], item["sk"]["S"], item_size({k: _value(v) for k, v in item.items()}))


def _value(raw: Mapping[str, Any]) -> object:
    """A client's attribute value as the plain value ``keydesign.item_size`` sizes."""
    ((kind, value),) = raw.items()
    if kind in ("N", "NS"):
        return Decimal(value) if kind == "N" else {Decimal(v) for v in value}
    if kind in ("SS", "BS"):
        return set(value)
    if kind == "M":
        return {k: _value(v) for k, v in value.items()}
    if kind == "L":
        return [_value(v) for v in value]
    return None if kind == "NULL" else value


def tier_of(pk: str) -> str:
    """The tier of an item of a readings table holding readings, by its partition key."""
    if pk.startswith(GROUP_PK_PREFIX):
        return GROUP_ITEMS
    if pk.startswith(SUB_PK_PREFIX):
        return SUB_ITEMS
    return COMPACTED if pk.startswith(CLUSTER_PK_PREFIX) or pk.endswith(COMPACTED_PK_SUFFIX) else BLOCKS


@dataclass(slots=True)
class DemoFacts:
    """What the demo observed; :func:`build_report` and :func:`draw_pictures` read it."""

    published: int
    failed_to_publish: int
    ledger: Sequence[tuple[str, Mapping[str, Any]]]  # every valid reading published, under its phase's name
    blocks: Sequence[Block]
    rejects: Sequence[Mapping[str, Any]]
    skipped: Sequence[Mapping[str, Any]]
    drained: bool
    hot_keys_skipped: Sequence[Mapping[str, Any]] = ()
    map_before: Mapping[str, Any] | None = None  # the control table's shard-map item, deserialised
    map_after: Mapping[str, Any] | None = None
    windows: Sequence[Mapping[str, Any]] = ()  # the detector's judged windows: {"window": ts, "summary": {...}}
    alerts: Sequence[Mapping[str, Any]] = ()  # the SNS notifications (``Subject``, ``Message``)
    boundary_ms: int | None = None  # when the hot sensor's split took effect (None: no split)
    queries: Mapping[str, Any] | None = None
    rollups: Mapping[str, Any] | None = None
    picture: Mapping[str, Any] | None = None
    #: The rotator's runs that returned (``{"now_ms", "summary"}``), ``failures``, ``clock``, each table's
    #: ``capacity`` at the end, the readings ``refused`` for a dropped period; and its ``picture``.
    rotation: dict[str, Any] | None = None
    exported: Mapping[str, Sequence[Reading]] = field(default_factory=dict)  # each dropped table's, from its export
    story_from_ms: int | None = None  # blocks before it are the replayed history, left out of the load figures
    dense_marks: Sequence[Item] = ()  # the readings tables' dense marks
    control: Sequence[Item] = ()  # every item of the control table, once the rollups ran
    #: The compaction function's runs once the streams drained (``Observer.compact``).
    compaction: Mapping[str, Any] | None = None
    runtime: Mapping[str, Any] = field(default_factory=dict)
    timings: Mapping[str, float] = field(default_factory=dict)

    def story(self) -> list[Block]:
        """What ingest wrote during the story: its blocks and group items (compaction's blocks and sub-items
        are written after it, at once, so they are no load at their readings' time)."""
        return [
            b
            for b in self.blocks
            if (self.story_from_ms is None or b.first_ms >= self.story_from_ms)
            and tier_of(b.pk) not in (COMPACTED, SUB_ITEMS)
        ]


def newest_copies(blocks: Iterable[Block]) -> Copies:
    """Each reading once, with the block of the highest version holding it, as readers keep it."""
    copies: Copies = {}
    for block in blocks:
        for r in block.readings:
            held = copies.get(key := (r.entity_id, r.ts_ms, r.event_id))
            if held is None or block.version > held[0]:
                copies[key] = (block.version, r, block)
    return copies


def by_table(stored: Copies) -> dict[str, list[Reading]]:
    tables: dict[str, list[Reading]] = defaultdict(list)
    for _, reading, block in stored.values():
        tables[block.table].append(reading)
    return tables


def build_report(
    *, scenario: Mapping[str, Any], config: Context, facts: DemoFacts, settings: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The report; ``report["ok"]`` is every check in ``report["checks"]``."""
    layout, boundary, story = config.layout(), facts.boundary_ms, facts.story()
    stored = newest_copies(facts.blocks)
    live = Counter((r.entity_id, r.event_id) for _, r, _ in stored.values())
    exported = Counter((r.entity_id, r.event_id) for readings in facts.exported.values() for r in readings)
    rejects = {str(m.get("reject_id")): m for m in reversed(facts.rejects)}
    by_reason = Counter(str(m.get("field")) for m in rejects.values())
    examples = {str(m.get("field")): str(m.get("reason")) for m in rejects.values()}
    only_exported = len(set(exported) - set(live))
    readings = {
        "published": facts.published,
        "failed_to_publish": facts.failed_to_publish,
        "written": len(live),
        "exported_then_dropped": only_exported,
        "rejected": len(rejects),
        "lost": facts.published - len(live) - only_exported - len(rejects),
        "duplicates": sum(n - 1 for n in (live + exported).values() if n > 1),
        "copies_in_older_blocks": sum(len(b.readings) for b in facts.blocks) - len(stored),
        "stream_drained": facts.drained,
        "phases": _phases(facts.ledger),
    }
    load_after = hot_after = not_run("the hot sensor was not split")
    if boundary is not None:
        after = [b for b in story if b.first_ms >= boundary]
        load_after, hot_after = partition_load(after), hot_sensor_after_split(after, layout)
    split = placement = not_run("the shard map was not read")
    if facts.map_after is not None:
        split = _split_section(facts, facts.map_after, layout)
        placement = placement_check(
            stored.values(),
            [r for _, r in facts.ledger],
            layout,
            shard_map(facts.map_after),
            WriteTier(config.write_tier_groups) if config.write_tier_groups else None,
        )
    checks = {
        "nothing_lost": readings["lost"] == 0 and facts.failed_to_publish == 0,
        "no_duplicates": readings["duplicates"] == 0,
        "stream_drained": facts.drained,
        "hot_entity_split": bool(split.get("hot_entity_split")),
        "no_key_over_1000_wcu_after_split": load_after.get("keys_over_1000_wcu_per_s", 1) == 0,
        "post_split_readings_on_sub_shards": hot_after.get("readings", 0) > 0 and hot_after["off_sub_shard_keys"] == 0,
        "every_reading_where_the_key_design_puts_it": placement.get("misplaced", 1) == 0,
        "queries_equal_to_published": bool(facts.queries and facts.queries.get("all_equal")),
    }
    if facts.rollups is not None:
        checks["rollups_applied"] = "through" in facts.rollups
    compaction = not_run("compaction is off")
    if facts.compaction is not None:
        compaction, checks["write_tier_compacted"] = compaction_section(facts.compaction, facts.blocks)
    costs = write_cost(facts, stored)
    if sparse := costs["shapes"].get(SPARSE):
        checks["sparse_fleet_under_the_write_units_bound"] = (
            sparse["reading_tiers"]["write_units_per_reading"] < SPARSE_WRITE_UNITS_BOUND
        )
    agents = agents_section(facts.ledger, live, rejects.values())
    if agents.get("status") != NOT_RUN:
        checks["every_agent_format_stored_and_its_bad_reading_rejected"] = all(
            a["written"] == a["published"] > 0 and a["rejected"] == 1 for a in agents["formats"].values()
        )
    rotation = not_run("no table_period: one readings table, nothing to rotate")
    if facts.rotation is not None:
        rotation, rotation_checks = rotation_section(facts.rotation, config, stored, facts.exported, facts.rejects)
        checks.update(rotation_checks)
    initial = ShardMap.initial(layout.bucket, config.shards)  # one item per reading had no entity split
    baseline = Baseline(layout, initial, config.retention_ms)
    design = ("layout_kind", "shards", "bucket", "table_period", "shard_map_cache_ttl_s")
    return {
        "ok": all(checks.values()),
        "checks": checks,
        "scenario": dict(scenario),
        "design": {
            **{name.removesuffix("_kind"): getattr(config, name) for name in design},
            "max_future": format_duration(config.max_future_ms),
            "ingest_batching_window_s": config.ingest_batching_window_s,
            "hot_split_threshold_wcu": config.split_threshold_wcu,
            **dict(settings or {}),
        },
        "readings": readings,
        "cost_per_reading": {
            "all": cost(facts.blocks, baseline),
            HOT_SENSOR: cost([b for b in facts.blocks if b.entity == HOT_SENSOR], baseline),
        },
        "write_cost": {**costs, "sparse_fleet_bound_write_units_per_reading": SPARSE_WRITE_UNITS_BOUND},
        "rejected_by_reason": [{"field": f, "count": n, "example": examples[f]} for f, n in by_reason.most_common()],
        "agent_formats": agents,
        "reject_messages": len(facts.rejects),
        "skipped_by_event_source": _skipped(facts.skipped),
        "hot_key_batches_skipped": _skipped(facts.hot_keys_skipped),
        "hot_keys": hot_keys_section(facts.windows, facts.alerts),
        "shard_map_changes": split,
        "partition_load": partition_load(story),
        "partition_load_before_split": partition_load([b for b in story if boundary is None or b.first_ms < boundary]),
        "partition_load_after_split": load_after,
        "hot_sensor_after_split": hot_after,
        "placement": placement,
        "queries": dict(facts.queries or not_run("the query API was not served")),
        "compaction": compaction,
        "rollups": dict(facts.rollups or not_run("rollups are off")),
        "partition_load_picture": dict(facts.picture or not_run("no picture was drawn")),
        "rotation": rotation,
        "runtime": dict(facts.runtime),
        "timings_s": {name: round(value, 2) for name, value in facts.timings.items()},
    }


def agents_section(
    ledger: Iterable[tuple[str, Mapping[str, Any]]],
    live: Mapping[tuple[str, str], int],
    rejects: Iterable[Mapping[str, Any]],
) -> dict[str, Any]:
    """Per agent format: its readings published (as ingest stores them), written (read back from the blocks),
    and the rejects of its bad reading (``bad_<format>`` its measure, named in the payload or the reason)."""
    published: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for name, reading in ledger:
        if name.startswith(AGENT_PHASE):
            published[name.removeprefix(AGENT_PHASE)].append(reading)
    if not published:
        return not_run("no reading was published through an agent's format")
    refused = [(f"{m.get('payload')} {m.get('reason')}", m) for m in rejects]
    formats = {}
    for fmt, readings in published.items():
        mine = [m for text, m in refused if f"bad_{fmt}" in text]
        formats[fmt] = {
            "entities": len({r["entity_id"] for r in readings}),
            "published": len(readings),
            "written": sum(1 for r in readings if (r["entity_id"], r["event_id"]) in live),
            "rejected": len(mine),
            "reject_reasons": sorted({f"{m.get('field')}: {m.get('reason')}" for m in mine}),
        }
    return {"measurement": AGENT_MEASUREMENT, "formats": formats}


def _phases(ledger: Iterable[tuple[str, Mapping[str, Any]]]) -> list[dict[str, Any]]:
    phases: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for name, reading in ledger:
        phases[name].append(reading)
    return [
        {
            "phase": name,
            "readings": len(readings),
            "sensor_alpha_001_readings": sum(1 for r in readings if r["entity_id"] == HOT_SENSOR),
            "event_time_from": format_ts(min(r["timestamp"] for r in readings)),
            "event_time_to": format_ts(max(r["timestamp"] for r in readings) + 1),
        }
        for name, readings in phases.items()
    ]


def _skipped(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    infos = [m.get("KinesisBatchInfo") or m.get("DDBStreamBatchInfo") or {} for m in messages]
    return {
        "batches": len(messages),
        "records": sum(int(i.get("batchSize", 0)) for i in infos),
        "conditions": dict(Counter(str(m.get("requestContext", {}).get("condition")) for m in messages)),
    }


@dataclass(frozen=True, slots=True)
class Baseline:
    """Where one item per reading (the format before blocks) would have put each reading."""

    layout: Layout
    shard_map: ShardMap
    retention_ms: int


def cost(blocks: Sequence[Block], baseline: Baseline) -> dict[str, Any]:
    """Write units and billed bytes per reading of ``blocks`` (every copy they hold paid for), beside one
    item per reading (``keydesign.legacy.legacy_item``) for the same readings, once each."""
    if not (n := len(readings := [r for _, r, _ in newest_copies(blocks).values()])):
        return {"readings": 0}
    b = baseline
    items = [item_size(legacy_item(r, b.layout, b.shard_map, ttl_for(r, b.retention_ms))) for r in readings]
    return {
        "readings": n,
        "blocks": len(blocks),
        "readings_per_block": round(n / len(blocks), 1),
        "write_units_per_reading": round(sum(b.write_units for b in blocks) / n, 4),
        "billed_bytes_per_reading": round(sum(b.size + STORAGE_OVERHEAD_BYTES for b in blocks) / n, 1),
        "one_item_per_reading": {
            "write_units_per_reading": round(sum(map(write_units, items)) / n, 4),
            "billed_bytes_per_reading": round(sum(s + STORAGE_OVERHEAD_BYTES for s in items) / n, 1),
        },
    }


def write_cost(facts: DemoFacts, stored: Copies) -> dict[str, Any]:
    """Write units and billed bytes per reading by tier and by fleet shape, from the items the scans found.

    Each stored item counts once: its write units (a block's or group item's from its sort key, as ingest
    and compaction billed its put; any other item's from its size) and its billed bytes (size + 100). A
    tier's figures are over every stored reading. A shape's are over its readings of the story (from
    ``story_from_ms``), each item holding readings shared among them alike (a group item holds many
    entities'), each dense mark, rollup mark and rollup its entity's (of the story's intervals); a total,
    a group partial and the control items are the fleet's, in no shape's figures."""
    story = facts.story_from_ms or 0
    tiers = {tier: {"items": 0, "write_units": 0, "billed_bytes": 0} for tier in TIERS}
    shares: dict[str, dict[str, list[float]]] = defaultdict(lambda: {t: [0.0, 0.0] for t in TIERS})

    def paid(tier: str, units: int, size: int, shape: str | None = None, share: float = 1.0) -> None:
        if shape is not None:
            shares[shape][tier][0] += units * share
            shares[shape][tier][1] += (size + STORAGE_OVERHEAD_BYTES) * share

    for b in facts.blocks:
        tier = tier_of(b.pk)
        _count(tiers[tier], b.write_units, b.size)
        for r in b.readings:
            if r.ts_ms >= story:
                paid(tier, b.write_units, b.size, shape_of(r.entity_id), 1 / len(b.readings))
    for mark in facts.dense_marks:
        _count(tiers[DENSE_MARKS], mark.write_units, mark.size)
        if parse_timestamp(mark.pk.rsplit("#", 1)[-1] + ":00Z", "pk") + HOUR_MS > story:
            paid(DENSE_MARKS, mark.write_units, mark.size, shape_of(mark.sk.removeprefix(DENSE_MARK_PREFIX)))
    for item in facts.control:
        tier = ROLLUPS if item.pk.startswith(ROLLUP_PK_PREFIXES) else CONTROL
        _count(tiers[tier], item.write_units, item.size)
        if (owner := _rollup_entity(item)) is not None and owner[1] > story:
            paid(tier, item.write_units, item.size, shape_of(owner[0]))
    readings: Counter[str | None] = Counter(shape_of(r.entity_id) for _, r, _ in stored.values() if r.ts_ms >= story)
    n = len(stored)
    return {
        "basis": "each stored item once: write units (a block's from its sort key, others' from their size) "
        "and billed bytes (size + 100); shapes over their readings of the story, an item's shared among its readings",
        "readings": n,
        "tiers": {tier: {**t, **_per_reading(t["write_units"], t["billed_bytes"], n)} for tier, t in tiers.items()},
        "shapes": {shape: _shape(readings[shape], shares[shape]) for shape in (DENSE, HOT, SPARSE) if readings[shape]},
    }


def _count(tier: dict[str, int], units: int, size: int) -> None:
    tier["items"] += 1
    tier["write_units"] += units
    tier["billed_bytes"] += size + STORAGE_OVERHEAD_BYTES


def _per_reading(units: float, billed: float, readings: int) -> dict[str, float]:
    return {
        "write_units_per_reading": round(units / readings, 4) if readings else 0.0,
        "billed_bytes_per_reading": round(billed / readings, 1) if readings else 0.0,
    }


def _shape(readings: int, shares: Mapping[str, list[float]]) -> dict[str, Any]:
    tiers = [shares[tier] for tier in READING_TIERS]
    return {
        "readings": readings,
        **_per_reading(sum(u for u, _ in shares.values()), sum(b for _, b in shares.values()), readings),
        "reading_tiers": _per_reading(sum(u for u, _ in tiers), sum(b for _, b in tiers), readings),
        "by_tier": {t: _per_reading(shares[t][0], shares[t][1], readings) for t in TIERS if shares[t][0]},
    }


def _rollup_entity(item: Item) -> tuple[str, int] | None:
    """The entity of a rollup mark (sk ``<level>#<start>#<entity>``) or rollup (pk ``...#<level>#<start>#<r>``,
    sk the entity), and the end of its interval; None for any other control item."""
    if item.pk.startswith("rollmark#") and item.sk.count("#") >= 2:  # the start items' sk is a time
        level, start, entity = item.sk.split("#", 2)
        return entity, parse_timestamp(start, "sk") + int(level)
    if item.pk.startswith("rollup#"):
        _, level, start, _ = item.pk.rsplit("#", 3)
        return item.sk, parse_timestamp(start, "pk") + int(level)
    return None


def compaction_section(compaction: Mapping[str, Any], blocks: Sequence[Block]) -> tuple[dict[str, Any], bool]:
    """The compaction function's runs, and whether every reading of an hour it compacted (by its watermark
    ``through``) whose newest copy was in a group item (no entity block holds it at that version or later:
    compaction leaves those where they are) is in a compacted block."""
    if "through" not in compaction:
        return dict(compaction), False
    through = parse_timestamp(compaction["through"], "through")
    newest: dict[str, dict[tuple[str, int, str], int]] = {
        tier: {} for tier in (GROUP_ITEMS, SUB_ITEMS, BLOCKS, COMPACTED)
    }
    for b in blocks:
        held = newest[tier_of(b.pk)]
        for r in b.readings:
            key = (r.entity_id, r.ts_ms, r.event_id)
            held[key] = max(held.get(key, b.version), b.version)
    due = {
        key
        for key, version in newest[GROUP_ITEMS].items()
        if key[1] - key[1] % HOUR_MS + HOUR_MS <= through and newest[BLOCKS].get(key, -1) < version
    }
    section = {
        **compaction,
        "write_tier_readings_due": len(due),
        "of_them_compacted": len(due & set(newest[COMPACTED])),
    }
    return section, bool(due) and due <= set(newest[COMPACTED])


def per_second(blocks: Iterable[Block], key: Callable[[Block], str]) -> dict[str, Counter[int]]:
    """Write units per second of each ``key(block)``: each block's, at the second of its first reading."""
    load: dict[str, Counter[int]] = defaultdict(Counter)
    for block in blocks:
        load[key(block)][block.first_ms // 1000] += block.write_units
    return load


def partition_load(blocks: Sequence[Block], top: int = 10) -> dict[str, Any]:
    """Each partition key's peak write units per second, the hottest first."""
    if not (peaks := {pk: max(s.values()) for pk, s in per_second(blocks, lambda b: b.pk).items()}):
        return {"partition_keys": 0}
    ranked = sorted(peaks.items(), key=lambda kv: (-kv[1], kv[0]))
    hot_keys = sorted({b.pk for b in blocks if b.entity == HOT_SENSOR})
    return {
        "partition_keys": len(peaks),
        "hottest_key": ranked[0][0],
        "hottest_peak_wcu_per_s": ranked[0][1],
        "mean_peak_wcu_per_s": round(sum(peaks.values()) / len(peaks), 1),
        "keys_over_1000_wcu_per_s": sum(1 for v in peaks.values() if v > PARTITION_WCU),
        "hot_sensor_keys": hot_keys,
        "hot_sensor_peak_wcu_per_s": max((peaks[pk] for pk in hot_keys), default=0),
        "top": [{"pk": pk, "peak_wcu_per_s": peak} for pk, peak in ranked[:top]],
    }


def hot_sensor_after_split(blocks: Iterable[Block], layout: Layout) -> dict[str, Any]:
    """Where the hot sensor's readings from the boundary on were stored: on its own sub-shard keys."""
    families: Counter[str] = Counter()
    for block in (b for b in blocks if b.entity == HOT_SENSOR):
        family = key_family(block.pk, layout.kind)
        families[family if f"#{HOT_SENSOR}#" in family else ""] += len(block.readings)
    off = families.pop("", 0)
    return {
        "readings": sum(families.values()) + off,
        "sub_shard_keys": len(families),
        "readings_per_sub_shard_key": dict(sorted(families.items())),
        "off_sub_shard_keys": off,
    }


def placement_check(
    stored: Iterable[tuple[int, Reading, Block]],
    ledger: Iterable[Mapping[str, Any]],
    layout: Layout,
    final: ShardMap,
    tier: WriteTier | None = None,
) -> dict[str, Any]:
    """Each published reading's block key against the keys the key design gives a block holding it under
    the final shard map (whose history says which count applied at each instant); with the write tier,
    its group's partition, its sub-items' and its cluster blocks' (the group's) and, of hours compacted before
    cluster blocks, its compacted partition too."""
    published = {(str(r["entity_id"]), str(r["event_id"])) for r in ledger}
    everything = [(r, b) for _, r, b in stored]
    checked = [(r, b) for r, b in everything if (r.entity_id, r.event_id) in published]
    wrong = [(r, b) for r, b in checked if b.pk not in _partitions(layout, r, final, tier)]
    return {
        "checked": len(checked),
        "misplaced": len(wrong),
        "not_in_ledger": len(everything) - len(checked),
        "examples": [{"event_id": r.event_id, "stored_pk": b.pk} for r, b in wrong[:5]],
    }


def _partitions(layout: Layout, reading: Reading, final: ShardMap, tier: WriteTier | None) -> list[str]:
    keys = layout.partitions_of(reading.entity_id, reading.ts_ms, final)
    if tier is not None:
        keys.append(tier.group_pk(tier.group_of(reading.entity_id), reading.ts_ms))
        keys.append(tier.sub_pk(tier.group_of(reading.entity_id), reading.ts_ms))
        keys.append(tier.cluster_pk(tier.group_of(reading.entity_id), layout.cluster_span(reading.ts_ms)))
        keys.append(layout.compacted_partition(reading.entity_id, reading.ts_ms, final))
    return keys


def hot_keys_section(windows: Sequence[Mapping[str, Any]], alerts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The detector's judged windows that found a hot key or split (as it recorded them), and its alerts."""
    hot: list[dict[str, Any]] = [
        {
            "window": str(w.get("window")),
            "hot_keys": [{"pk": str(k), "wcu_per_s": float(v)} for k, v in s.get("hot_keys") or []],
            "splits": s.get("splits") or [],
        }
        for w in sorted(windows, key=lambda w: str(w.get("window")))
        if (s := w.get("summary") or {}).get("hot_keys") or s.get("splits")
    ]
    return {
        "windows_judged": len(windows),
        "windows_with_hot_keys": len(hot),
        "hot_keys_detected": sorted({k["pk"] for w in hot for k in w["hot_keys"]}),
        "first_detection": hot[0] if hot else None,
        "windows": hot[:20],
        "alerts": [{"subject": a.get("Subject"), **json.loads(str(a.get("Message", "{}")))} for a in alerts],
    }


def _split_section(facts: DemoFacts, after: Mapping[str, Any], layout: Layout) -> dict[str, Any]:
    before = facts.map_before
    known = shard_map(before).entity_history if before is not None else {}
    changes: list[dict[str, Any]] = []
    for entity, history in sorted(shard_map(after).entity_history.items()):
        previous = known[entity][-1].shards if entity in known else 1
        for change in history[len(known.get(entity, ())) :]:
            counts = {"from_sub_shards": previous, "to_sub_shards": change.shards}
            changes.append({"entity": entity, **counts, "effective_from": format_ts(change.effective_from_ms)})
            previous = change.shards
    hot = [c for c in changes if c["entity"] == HOT_SENSOR]
    return {
        "before": _described(before) if before is not None else None,
        "after": _described(after),
        "changes": changes,
        "hot_entity_split": any(c["to_sub_shards"] > c["from_sub_shards"] for c in hot),
        "split_boundary": format_ts(facts.boundary_ms) if facts.boundary_ms is not None else None,
        "bucket": layout.bucket.spec,
    }


def _described(item: Mapping[str, Any]) -> dict[str, Any]:
    return {**json.loads(str(item["map"])), "updated_at": item.get("updated_at", ""), "reason": item.get("reason", "")}


def rotation_section(
    facts: Mapping[str, Any],
    config: Context,
    stored: Copies,
    exported: Mapping[str, Sequence[Reading]],
    rejects: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], dict[str, bool]]:
    """The ``rotation`` section and its checks. Each table's steps are what the rotator's run summaries
    say of it (every list or mapping in them naming the table; a phase when it changes), not a fixed
    list, so they follow the rotator as it changes; its readings, live or read back from its export."""
    layout, prefix, runs = config.layout(), table_head(config.table_prefix), facts["runs"]
    period, retention = layout.table_period, config.retention_ms
    assert period is not None  # noqa: S101 - the rotator runs only with a table period
    starts: dict[str, int] = {}
    if runs:  # from before the replay's start (less any table then alive) to a few periods past the last run
        times, nominal = [int(r["now_ms"]) for r in runs], period.nominal_ms
        low, high = min(times) - retention - 2 * nominal, max(times) + (config.prebuild_periods + 2) * nominal * 2
        starts = {layout.table_for(start): start for start in period.starts(low, high)}
    steps: dict[str, list[dict[str, str]]] = defaultdict(list)
    when: dict[str, dict[str, int]] = defaultdict(dict)
    phases: dict[str, list[str]] = defaultdict(list)
    errors = [
        {"at": format_ts(int(r["now_ms"])), **e} for r in runs for e in (r.get("summary") or {}).get("errors", [])
    ]
    for run in runs:
        now = int(run["now_ms"])
        for key, value in (run.get("summary") or {}).items():
            for name, detail in _entries(value):
                if not (isinstance(name, str) and name.startswith(prefix)) or key in ("errors", "skipped"):
                    continue
                if key == "phases":
                    if phases[name][-1:] == [detail]:
                        continue
                    phases[name].append(detail)
                when[name].setdefault(key, now)
                ahead = key == "created" and starts.get(name, 0) > now
                steps[name].append({"at": format_ts(now), "step": "prebuilt" if ahead else _step(key, detail)})
    live = by_table(stored)
    holding = {**exported, **live}
    misplaced = [
        {"table": t, "event_id": r.event_id, "belongs_in": layout.table_for(r.ts_ms)}
        for t, rs in holding.items()
        for r in rs
        if layout.table_for(r.ts_ms) != t
    ]
    dropped = [n for n in steps if "deleted" in when[n]]
    prebuilt = [n for n in steps if any(s["step"] == "prebuilt" for s in steps[n])]
    capacity = facts.get("capacity") or {}
    tables = [
        {
            "table": name,
            "period_start": format_ts(starts[name]) if name in starts else None,
            "steps": steps[name],
            "state": "dropped" if name in dropped else (phases[name] or ["not seen by the rotator"])[-1],
            "readings_stored": len(live.get(name, ())),
            **({"readings_in_its_export": len(exported[name])} if name in exported else {}),
            **({"capacity": dict(capacity[name])} if name in capacity else {}),
        }
        for name in sorted(set(steps) | set(holding), key=lambda n: (starts.get(n, 0), n))
    ]
    # A build run (ingest's request for a past table) measures no periods: the last run that did counts.
    summaries: list[dict[str, Any]] = [run.get("summary") or {} for run in runs]
    last: dict[str, Any] = next((s for s in reversed(summaries) if s.get("periods_ready") is not None), {})
    refused = _refused(facts.get("refused") or {}, rejects)
    checks = {
        "readings_landed_in_two_or_more_period_tables": sum(1 for rs in holding.values() if rs) >= 2,
        "every_reading_in_its_periods_table": not misplaced,
        "rotator_prebuilt_the_next_tables": bool(prebuilt)
        and int(last.get("periods_ready") or 0) >= 1 + config.prebuild_periods,
        "rotator_took_a_table_through_its_phases_to_its_drop": any(len(phases[n]) >= 2 for n in dropped),
        "rotator_dropped_a_table_past_retention": bool(dropped)
        and all(n in starts and when[n]["deleted"] >= period.next_start(starts[n]) + retention for n in dropped),
        "rotator_exported_each_table_before_dropping_it": config.export_bucket is None
        or all(n in exported and when[n].get("exported", math.inf) <= when[n]["deleted"] for n in dropped),
        "rotator_runs_without_errors": not errors and facts["failures"] == 0,
        "ingest_refused_readings_of_a_dropped_period": 0 < refused["published"] == refused["rejected"],
    }
    lifecycle = {
        "tables": len(tables),
        "with_readings": sum(1 for rs in holding.values() if rs),
        "prebuilt": prebuilt,
        "exported": [n for n in steps if "exported" in when[n]],
        "dropped": dropped,
        "periods_ready_at_the_end": last.get("periods_ready"),
    }
    return {
        "status": "run",
        "period": period.name,
        "schedule": f"every {config.rotation_interval_minutes()} min of the rotator's clock",
        "clock": dict(facts.get("clock") or {}),
        "runs": len(runs),
        "failures": facts["failures"],
        "export_bucket": config.export_bucket,
        "lifecycle": lifecycle,
        "tables": tables,
        "misplaced_examples": misplaced[:5],
        "refused_for_a_dropped_period": refused,
        "errors": errors[:20],
        "last_run": dict(last),
        "picture": dict(facts.get("picture") or {}),
    }, checks


def _entries(value: Any) -> list[tuple[Any, Any]]:
    """(table name, detail) of each entry of a run summary's mapping or list (of names or of records)."""
    if isinstance(value, Mapping):
        return list(value.items())
    return [(v.get("table") if isinstance(v, Mapping) else v, v) for v in value] if isinstance(value, list) else []


def _step(key: str, detail: Any) -> str:
    """A step as a run summary names it: the key, and what it says besides the table's name."""
    if key == "phases":
        return f"phase: {detail}"
    if isinstance(detail, Mapping):
        return f"{key}: " + ", ".join(f"{k} {v}" for k, v in detail.items() if k != "table")
    return f"{key}: {', '.join(map(str, detail))}" if isinstance(detail, list) else key


def _refused(refused: Mapping[str, Any], rejects: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    wanted, reasons, seen = set(refused.get("event_ids", ())), Counter[str](), set[str]()
    for message in rejects:
        try:
            event_id = str(json.loads(str(message.get("payload")))["event_id"])
        except (ValueError, KeyError, TypeError):
            continue
        if event_id in wanted and event_id not in seen:
            seen.add(event_id)
            reasons[f"{message.get('field')}: {message.get('reason')}"] += 1
    return {
        "table": refused.get("table"),
        "published": len(wanted),
        "rejected": len(seen),
        "reasons": [{"reason": r, "count": n} for r, n in reasons.most_common()],
    }


# -- the pictures -----------------------------------------------------------------------------------


def draw_pictures(facts: DemoFacts, config: Context, out_dir: Path, *, top: int = 6) -> None:
    """``partition-load.png``: the hottest key families' write units per second (the key without its bucket,
    as the hot-key metrics name it, so a shard is one line across buckets); with the rotation,
    ``table-writes.png``: readings per table over event time, the rotator's drops marked."""
    kind, threshold = config.layout().kind, config.split_threshold_wcu
    if families := per_second(facts.story(), lambda b: key_family(b.pk, kind)):
        path = out_dir / "partition-load.png"
        facts.picture = draw_load(families, path, threshold=threshold, boundary_ms=facts.boundary_ms, top=top)
    if facts.rotation is not None:
        tables = {**facts.exported, **by_table(newest_copies(facts.blocks))}
        facts.rotation["picture"] = draw_tables(tables, facts.rotation, out_dir / "table-writes.png")


def _grid(counts: Mapping[str, Counter[int]]) -> tuple[int, dict[str, list[int]]]:
    """The first slot any counter holds, and each one's counts slot by slot from it to the last any holds."""
    first, last = min(min(c) for c in counts.values()), max(max(c) for c in counts.values())
    return first, {name: [c.get(n, 0) for n in range(first, last + 1)] for name, c in counts.items()}


def load_series(per_family: Mapping[str, Counter[int]], top: int) -> tuple[int, list[tuple[str, list[int]]]]:
    """The first second, and the ``top`` hottest families' write units per second from it, then the peak
    of all the others (second by second)."""
    first, grid = _grid(per_family)
    ranked = sorted(grid, key=lambda f: (-max(grid[f]), f))
    series = [(family, grid[family]) for family in ranked[:top]]
    if ranked[top:]:
        series.append((OTHERS, [max(second) for second in zip(*(grid[f] for f in ranked[top:]), strict=True)]))
    return first, series


def draw_load(
    per_family: Mapping[str, Counter[int]], path: Path, *, threshold: int, boundary_ms: int | None, top: int = 6
) -> dict[str, Any]:
    first, series = load_series(per_family, top)
    split = f"; {HOT_SENSOR} split at {format_ts(boundary_ms)}" if boundary_ms is not None else ""
    legend = {"loc": "upper right", "fontsize": 8, "title": "partition key, without its bucket", "title_fontsize": 8}
    with _png(path, title=f"Write units per second, hottest partition keys{split}", legend=legend) as axes:
        for label, values in series:
            style = {"color": "0.6", "linewidth": 0.8, "linestyle": ":"} if label == OTHERS else {"linewidth": 1.1}
            axes.plot(range(len(values)), values, label=label, **style)
        axes.axhline(PARTITION_WCU, color="crimson", linestyle="--", linewidth=1, label="1,000 WCU/s: one key's limit")
        label = f"split threshold, lowered to {threshold} WCU/s for the demo"
        axes.axhline(threshold, color="darkorange", linestyle=":", linewidth=1, label=label)
        if boundary_ms is not None:
            axes.axvline(boundary_ms / 1000 - first, color="black", linewidth=1.2, label="split takes effect")
        axes.set_xlabel(f"seconds since {format_ts(first * 1000)} (event time of each block's first reading)")
        axes.set_ylabel("write units per second (log scale)")
    return {
        "path": str(path),
        "origin": format_ts(first * 1000),
        "measures": LOAD_BASIS,
        "series": [{"label": label, "peak_wcu_per_s": max(values)} for label, values in series],
        "threshold_wcu": threshold,
        "limit_wcu": PARTITION_WCU,
    }


def draw_tables(tables: Mapping[str, Iterable[Reading]], rotation: Mapping[str, Any], path: Path) -> dict[str, Any]:
    """Stacked bars of readings per :data:`SLICE_MS` of event time, one colour per table; the rotator's drops
    marked along the top, the moment the replayed clock met the wall clock as a line. {}: no readings."""
    import matplotlib  # noqa: PLC0415 - only the demo draws

    if not (counts := {n: c for n, rs in sorted(tables.items()) if (c := Counter(r.ts_ms // SLICE_MS for r in rs))}):
        return {}
    first, grid = _grid(counts)
    runs, origin_ms = rotation["runs"], first * SLICE_MS

    def hours(ms: int) -> float:
        return (ms - origin_ms) / 3_600_000

    legend = {"loc": "upper left", "fontsize": 7, "title": "table", "title_fontsize": 8}
    with _png(path, title="Readings per table over event time, and the rotator's drops", legend=legend) as axes:
        colour = {name: matplotlib.colormaps["tab10"](i % 10) for i, name in enumerate(grid)}
        width = len(next(iter(grid.values())))
        x, bottom = [hours(origin_ms + n * SLICE_MS) for n in range(width)], [0] * width
        for name, values in grid.items():
            axes.bar(x, values, width=SLICE_MS / 3_600_000, bottom=bottom, align="edge", color=colour[name], label=name)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        for run in runs:
            for name in (run.get("summary") or {}).get("deleted", []):
                axes.scatter([hours(int(run["now_ms"]))], [max(bottom) * 2], marker="x", color=colour.get(name, "0.3"))
        axes.scatter([], [], marker="x", color="0.3", label="rotator: dropped (after its export)")
        # The first run on the wall clock is the last; the one before it ended the replay.
        if (rotation.get("clock") or {}).get("caught_up_after_s") is not None and len(runs) > 1:
            axes.axvline(hours(int(runs[-2]["now_ms"])), color="black", linewidth=1, label="replay met the wall clock")
        axes.set_xlabel(f"event time, hours since {format_ts(origin_ms)}")
        axes.set_ylabel(f"readings per {SLICE_MS // 60_000} min (log scale)")
    return {
        "path": str(path),
        "origin": format_ts(origin_ms),
        "slice_minutes": SLICE_MS // 60_000,
        "tables": [{"table": name, "readings": sum(values)} for name, values in grid.items()],
    }


@contextmanager
def _png(path: Path, *, title: str, legend: Mapping[str, Any]) -> Iterator[Any]:
    """The axes of a demo-sized figure; then on a log scale from 0, titled, gridded, with ``legend``,
    saved as a PNG and closed."""
    import matplotlib  # noqa: PLC0415 - only the demo draws; a second to import

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(11, 5.5), dpi=110)
    try:
        yield axes
        axes.set_yscale("symlog", linthresh=10)
        axes.set_ylim(bottom=0)
        axes.set_title(title)
        axes.grid(alpha=0.3)
        axes.legend(**legend)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(path)
    finally:
        plt.close(figure)


# -- the summary on stdout ------------------------------------------------------------------------------


def render(report: Mapping[str, Any]) -> str:
    """A short human summary: the figures that tell the story, each query's verdict, then what failed
    (``report.json`` holds the rest)."""
    r, d, hot, rotation = report["readings"], report["design"], report["hot_keys"], report["rotation"]
    cost, scenario = report["cost_per_reading"]["all"], report["scenario"]
    lines = [
        f"Local demo: {scenario.get('sensors', 0):,} sensors + {HOT_SENSOR} (faults: {scenario.get('faults', 'none')}"
        f"); {d['bucket']} buckets, hot-key split threshold lowered to {d['hot_split_threshold_wcu']} WCU/s for the "
        "demo (the stack's: 500)",
        f"readings: published {r['published']:,}, written {r['written']:,}, in exports of dropped tables "
        f"{r['exported_then_dropped']:,}, rejected {r['rejected']:,}; lost {r['lost']:,}, "
        f"duplicates {r['duplicates']:,}",
    ]
    if one := cost.get("one_item_per_reading"):
        lines.append(
            f"per reading: {cost['write_units_per_reading']:.4f} write units, {cost['billed_bytes_per_reading']:.1f} "
            f"billed bytes ({cost['readings_per_block']:g} a block); one item each: "
            f"{one['write_units_per_reading']:.2f} and {one['billed_bytes_per_reading']:.1f}"
        )
    lines.append(f"hot keys: {hot['windows_with_hot_keys']} of {hot['windows_judged']} judged window(s) had one")
    lines += [
        f"shard map: {c['entity']} {c['from_sub_shards']} -> {c['to_sub_shards']} sub-shards from {c['effective_from']}"
        for c in report["shard_map_changes"].get("changes", [])
    ]
    for when in ("before", "after"):
        if (load := report[f"partition_load_{when}_split"]).get("partition_keys"):
            peak = f"{load['hottest_key']} at {load['hottest_peak_wcu_per_s']} WCU/s"
            lines.append(f"{when} the split: hottest key {peak} ({LOAD_BASIS})")
    if (agents := report.get("agent_formats", {})).get("formats"):
        lines.append(
            "agents' formats: "
            + ", ".join(f"{f} {a['written']}/{a['published']} stored" for f, a in agents["formats"].items())
            + f", each format's bad reading rejected ({sum(a['rejected'] for a in agents['formats'].values())})"
        )
    for shape, c in report.get("write_cost", {}).get("shapes", {}).items():
        tiers = ", ".join(f"{t} {v['write_units_per_reading']:.3f}" for t, v in c["by_tier"].items())
        held = c["reading_tiers"]
        lines.append(
            f"{shape}: {c['readings']:,} readings; {c['write_units_per_reading']:.3f} write units and "
            f"{c['billed_bytes_per_reading']:.1f} billed bytes a reading ({tiers}); in the readings' tiers "
            f"{held['write_units_per_reading']:.3f} and {held['billed_bytes_per_reading']:.1f}"
        )
    if (compaction := report.get("compaction", {})).get("through"):
        lines.append(
            f"compaction: through {compaction['through']}, {compaction['compacted_blocks_written']:,} compacted "
            f"blocks of {compaction['readings_compacted']:,} readings in {compaction['runs']} run(s)"
        )
    if (rollups := report["rollups"]).get("through"):
        names = ("totals_through", "minute_totals_through")  # fleet totals' reach: hourly, and the fresh minutes'
        reach = "".join(f"; {name.replace('_', ' ')} {rollups[name]}" for name in names if rollups.get(name))
        lines.append(f"rollups: applied through {rollups['through']}{reach}")
    lines += [
        f"query {c['name']}: " + ("equal" if c["equal"] else f"DIFFERENT ({c['difference']})")
        for c in report["queries"].get("checks", [])
    ]
    if rotation.get("status") == NOT_RUN:
        lines.append(f"rotation: not run ({rotation['reason']})")
    else:
        life = rotation["lifecycle"]
        lines.append(
            f"rotation: {rotation['period']} tables, {rotation['runs']} rotator runs; prebuilt "
            f"{len(life['prebuilt'])}, exported {len(life['exported'])}, dropped {len(life['dropped'])}"
        )
    pictures = [report["partition_load_picture"].get("path"), rotation.get("picture", {}).get("path")]
    lines += [f"picture: {path}" for path in pictures if path]
    failed = [name.replace("_", " ") for name, passed in report["checks"].items() if not passed]
    total = report.get("timings_s", {}).get("total")
    lines.append(("OK" + (f" in {total:.0f} s" if total else "")) if report["ok"] else "FAILED: " + "; ".join(failed))
    return "\n".join(lines)
