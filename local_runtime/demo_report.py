"""The demo's report from what was observed (pure: no AWS calls; the unit tests feed it by hand).

Every figure is counted from outside the running system: readings published (the producer's own count),
stored (every block decoded; of two copies of a reading the newest kept, as readers do), in the exports
of dropped tables, rejected (distinct messages on the rejects queue); what blocks cost per reading beside
one item per reading; the detector's judged windows and alerts; the shard map before and after;
partition load, each block's write units at the second of its first reading; where each reading sits
against where the key design puts it; the queries; the rollups; each period table's life as the
rotator's run summaries tell it.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.config import Context
from keydesign import Layout, Reading, ShardMap, decode_block, format_ts, item_size, ttl_for, write_units
from keydesign.capacity import PARTITION_WCU
from keydesign.layouts import key_family, parse_keys
from keydesign.periods import format_duration

HOT_SENSOR = "sensor-alpha-001"
NOT_RUN = "not run"
ITEM_OVERHEAD_BYTES = 100  # DynamoDB bills each item's storage 100 bytes above its size
SLICE_MS = 5 * 60_000  # the table-writes picture counts readings per 5 minutes of event time
Copies = dict[tuple[str, int, str], tuple[int, Reading, "Block"]]


@dataclass(frozen=True, slots=True)
class StoredMap:
    """The shard-map item of the control table at one moment."""

    shard_map: ShardMap
    updated_at: str
    reason: str

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> StoredMap:
        """From the (deserialised) item: ``map`` JSON, ``updated_at``, ``reason``."""
        shard_map = ShardMap.from_dict(json.loads(str(item["map"])))
        return cls(shard_map, str(item.get("updated_at", "")), str(item.get("reason", "")))

    def describe(self) -> dict[str, Any]:
        return {**self.shard_map.to_dict(), "updated_at": self.updated_at, "reason": self.reason}


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
    def from_item(cls, table: str, item: Mapping[str, Any], layout: Layout) -> Block:
        """From an item as a DynamoDB client returns it; ValueError when it is not a block."""
        pk, sk, payload = item["pk"]["S"], item["sk"]["S"], item["b"]["B"]
        parts = parse_keys(pk, sk, layout.kind)
        if parts is None:
            raise ValueError(f"{table}: {pk} / {sk} is not a block's key")
        header, readings = decode_block(parts.entity, payload)
        plain = {"pk": pk, "sk": sk, "b": payload, **({"ttl": int(item["ttl"]["N"])} if "ttl" in item else {})}
        return cls(table, pk, parts.write_units, item_size(plain), header.version, tuple(readings))


@dataclass(frozen=True, slots=True)
class RotationFacts:
    """The rotator's runs that returned (``{"now_ms", "summary"}``, in order), its failed runs, its
    clock, each table's billing at the end, and the readings published for a dropped period."""

    runs: Sequence[Mapping[str, Any]]
    failures: int
    clock: Mapping[str, Any]
    capacity: Mapping[str, Mapping[str, Any]]
    refused: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class DemoFacts:
    """What the demo observed; :func:`build_report` turns it into the report."""

    published: int
    failed_to_publish: int
    #: Every valid reading the demo published, as sent, under the name of the phase that sent it.
    ledger: Sequence[tuple[str, Mapping[str, Any]]]
    blocks: Sequence[Block]
    rejects: Sequence[Mapping[str, Any]]
    skipped: Sequence[Mapping[str, Any]]
    drained: bool
    hot_keys_skipped: Sequence[Mapping[str, Any]] = ()
    map_before: StoredMap | None = None
    map_after: StoredMap | None = None
    #: The detector's judged windows (``{"window": ts, "summary": {...}}``) and its notifications.
    windows: Sequence[Mapping[str, Any]] = ()
    alerts: Sequence[Mapping[str, Any]] = ()
    #: When the hot sensor's split took effect (None: no split happened).
    boundary_ms: int | None = None
    queries: Mapping[str, Any] | None = None
    rollups: Mapping[str, Any] | None = None
    picture: Mapping[str, Any] | None = None
    rotation: RotationFacts | None = None
    rotation_picture: Mapping[str, Any] | None = None
    #: The readings of each dropped table, read back from its export.
    exported: Mapping[str, Sequence[Reading]] = field(default_factory=dict)
    #: Where the story begins; blocks before it are the replayed history, left out of the load figures.
    story_from_ms: int | None = None
    runtime: Mapping[str, Any] = field(default_factory=dict)
    timings: Mapping[str, float] = field(default_factory=dict)

    def story(self) -> list[Block]:
        return [b for b in self.blocks if self.story_from_ms is None or b.first_ms >= self.story_from_ms]


def newest_copies(blocks: Iterable[Block]) -> Copies:
    """Each reading once, with the block of the highest version holding it, as readers keep it."""
    copies: Copies = {}
    for block in blocks:
        for r in block.readings:
            held = copies.get(key := (r.entity_id, r.ts_ms, r.event_id))
            if held is None or block.version > held[0]:
                copies[key] = (block.version, r, block)
    return copies


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
    readings = {
        "published": facts.published,
        "failed_to_publish": facts.failed_to_publish,
        "written": len(live),
        "exported_then_dropped": len(set(exported) - set(live)),
        "rejected": len(rejects),
        "lost": facts.published - len(live) - len(set(exported) - set(live)) - len(rejects),
        "duplicates": sum(n - 1 for n in (live + exported).values() if n > 1),
        "copies_in_older_blocks": sum(len(b.readings) for b in facts.blocks) - len(stored),
        "stream_drained": facts.drained,
        "phases": _phases(facts.ledger),
    }
    no_split: dict[str, Any] = {"status": NOT_RUN, "reason": "the hot sensor was not split"}
    no_map: dict[str, Any] = {"status": NOT_RUN, "reason": "the shard map was not read"}
    after = [b for b in story if boundary is not None and b.first_ms >= boundary]
    load_after = partition_load(after) if boundary is not None else no_split
    hot_after = hot_sensor_after_split(after, layout) if boundary is not None else no_split
    split = _split_section(facts, layout) if facts.map_after is not None else no_map
    ledger = [r for _, r in facts.ledger]
    placement = (
        placement_check(stored.values(), ledger, layout, facts.map_after.shard_map) if facts.map_after else no_map
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
    rotation: dict[str, Any] = {"status": NOT_RUN, "reason": "no table_period: one readings table, nothing to rotate"}
    if facts.rotation is not None:
        rotation, rotation_checks = rotation_section(facts.rotation, config, stored, facts.exported, facts.rejects)
        rotation["picture"] = dict(facts.rotation_picture or {})
        checks.update(rotation_checks)
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
            "all": cost(facts.blocks, layout, config.retention_ms),
            HOT_SENSOR: cost([b for b in facts.blocks if b.entity == HOT_SENSOR], layout, config.retention_ms),
        },
        "rejected_by_reason": [{"field": f, "count": n, "example": examples[f]} for f, n in by_reason.most_common()],
        "reject_messages": len(facts.rejects),
        "skipped_by_event_source": _skipped(facts.skipped),
        "hot_key_batches_skipped": _skipped(facts.hot_keys_skipped),
        "hot_keys": hot_keys_section(facts.windows, facts.alerts),
        "shard_map_changes": split,
        "partition_load": partition_load(story),
        "partition_load_before_split": partition_load(b for b in story if boundary is None or b.first_ms < boundary),
        "partition_load_after_split": load_after,
        "hot_sensor_after_split": hot_after,
        "placement": placement,
        "queries": dict(facts.queries or {"status": NOT_RUN, "reason": "the query API was not served"}),
        "rollups": dict(facts.rollups or {"status": NOT_RUN, "reason": "rollups are off"}),
        "partition_load_picture": dict(facts.picture or {"status": NOT_RUN, "reason": "no picture was drawn"}),
        "rotation": rotation,
        "runtime": dict(facts.runtime),
        "timings_s": {name: round(value, 2) for name, value in facts.timings.items()},
    }


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
    conditions = Counter(str(m.get("requestContext", {}).get("condition")) for m in messages)
    return {
        "batches": len(messages),
        "records": sum(int(i.get("batchSize", 0)) for i in infos),
        "conditions": dict(conditions),
    }


# -- cost, load and placement -----------------------------------------------------------------------


def one_item(pk: str, reading: Reading, layout: Layout, retention_ms: int) -> dict[str, object]:
    """The item ``reading`` had alone before blocks (b224d42; ``benchmarks/blocks.py`` makes the same)."""
    r = reading
    item = {
        "pk": pk,
        "sk": layout.reading_key(r.entity_id, r.ts, r.event_id),
        "e": r.entity_id,
        "t": r.ts,
        "i": r.event_id,
        "m": dict(r.measures),
        "d": dict(r.dimensions),
        "ttl": ttl_for(r, retention_ms),
    }
    return {name: value for name, value in item.items() if value != {}}


def cost(blocks: Sequence[Block], layout: Layout, retention_ms: int) -> dict[str, Any]:
    """Write units and billed bytes per reading of ``blocks`` (every copy they hold paid for), and what
    one item per reading (on its block's partition) would have cost for the same readings, once each."""
    readings = [(r, b) for _, r, b in newest_copies(blocks).values()]
    if not (n := len(readings)):
        return {"readings": 0}
    items = [item_size(one_item(b.pk, r, layout, retention_ms)) for r, b in readings]
    return {
        "readings": n,
        "blocks": len(blocks),
        "readings_per_block": round(n / len(blocks), 1),
        "write_units_per_reading": round(sum(b.write_units for b in blocks) / n, 4),
        "billed_bytes_per_reading": round(sum(b.size + ITEM_OVERHEAD_BYTES for b in blocks) / n, 1),
        "one_item_per_reading": {
            "write_units_per_reading": round(sum(map(write_units, items)) / n, 4),
            "billed_bytes_per_reading": round(sum(s + ITEM_OVERHEAD_BYTES for s in items) / n, 1),
        },
    }


def partition_load(blocks: Iterable[Block], top: int = 10) -> dict[str, Any]:
    """Write units per second on every partition key: each block's, at the second of its first reading."""
    per_second: dict[str, Counter[int]] = defaultdict(Counter)
    hot_keys: set[str] = set()
    for block in blocks:
        per_second[block.pk][block.first_ms // 1000] += block.write_units
        if block.entity == HOT_SENSOR:
            hot_keys.add(block.pk)
    if not per_second:
        return {"partition_keys": 0}
    peaks = {pk: max(seconds.values()) for pk, seconds in per_second.items()}
    ranked = sorted(peaks.items(), key=lambda kv: (-kv[1], kv[0]))
    return {
        "partition_keys": len(peaks),
        "hottest_key": ranked[0][0],
        "hottest_peak_wcu_per_s": ranked[0][1],
        "mean_peak_wcu_per_s": round(sum(peaks.values()) / len(peaks), 1),
        "keys_over_1000_wcu_per_s": sum(1 for v in peaks.values() if v > PARTITION_WCU),
        "hot_sensor_keys": sorted(hot_keys),
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
    shard_map: ShardMap,
) -> dict[str, Any]:
    """Each stored reading's block key against the keys the key design gives a block holding it under the
    final shard map (whose history says which count applied at each instant)."""
    published = {(str(r["entity_id"]), str(r["event_id"])) for r in ledger}
    everything = [(r, b) for _, r, b in stored]
    checked = [(r, b) for r, b in everything if (r.entity_id, r.event_id) in published]
    wrong = [(r, b) for r, b in checked if b.pk not in layout.partitions_of(r.entity_id, r.ts_ms, shard_map)]
    return {
        "checked": len(checked),
        "misplaced": len(wrong),
        "not_in_ledger": len(everything) - len(checked),
        "examples": [{"event_id": r.event_id, "stored_pk": b.pk} for r, b in wrong[:5]],
    }


# -- hot keys and the shard map ---------------------------------------------------------------------


def hot_keys_section(windows: Sequence[Mapping[str, Any]], alerts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The detector's judged windows that found a hot key or split (as it recorded them), and its alerts."""
    hot: list[dict[str, Any]] = []
    for window in sorted(windows, key=lambda w: str(w.get("window"))):
        summary = window.get("summary") or {}
        keys, splits = summary.get("hot_keys") or [], summary.get("splits") or []
        if keys or splits:
            keyed = [{"pk": str(k), "wcu_per_s": float(v)} for k, v in keys]
            hot.append({"window": str(window.get("window")), "hot_keys": keyed, "splits": splits})
    return {
        "windows_judged": len(windows),
        "windows_with_hot_keys": len(hot),
        "hot_keys_detected": sorted({k["pk"] for w in hot for k in w["hot_keys"]}),
        "first_detection": hot[0] if hot else None,
        "windows": hot[:20],
        "alerts": [{"subject": a.get("subject"), **(a.get("body") or {})} for a in alerts],
    }


def _split_section(facts: DemoFacts, layout: Layout) -> dict[str, Any]:
    after, before = facts.map_after, facts.map_before
    assert after is not None  # noqa: S101 - the caller checked
    known = before.shard_map.entity_history if before is not None else {}
    changes: list[dict[str, Any]] = []
    for entity, history in sorted(after.shard_map.entity_history.items()):
        previous = known[entity][-1].shards if entity in known else 1
        for change in history[len(known.get(entity, ())) :]:
            changes.append(
                {
                    "entity": entity,
                    "from_sub_shards": previous,
                    "to_sub_shards": change.shards,
                    "effective_from": format_ts(change.effective_from_ms),
                }
            )
            previous = change.shards
    hot = [c for c in changes if c["entity"] == HOT_SENSOR]
    return {
        "before": before.describe() if before is not None else None,
        "after": after.describe(),
        "changes": changes,
        "hot_entity_split": any(c["to_sub_shards"] > c["from_sub_shards"] for c in hot),
        "split_boundary": format_ts(facts.boundary_ms) if facts.boundary_ms is not None else None,
        "bucket": layout.bucket.spec,
    }


# -- the rotation ----------------------------------------------------------------------------------


def rotation_section(
    facts: RotationFacts,
    config: Context,
    stored: Copies,
    exported: Mapping[str, Sequence[Reading]],
    rejects: Sequence[Mapping[str, Any]],
) -> tuple[dict[str, Any], dict[str, bool]]:
    """The ``rotation`` section and its checks. Each table's steps are what the rotator's run summaries
    say of it (every list or mapping in them naming the table; a phase when it changes), not a fixed
    list, so they follow the rotator as it changes; its readings, live or read back from its export."""
    layout, prefix = config.layout(), f"{config.table_prefix}-"
    period, retention = layout.table_period, config.retention_ms
    assert period is not None  # noqa: S101 - the rotator runs only with a table period
    starts = _period_starts(facts, config)
    steps: dict[str, list[dict[str, str]]] = defaultdict(list)
    when: dict[str, dict[str, int]] = defaultdict(dict)
    phases: dict[str, list[str]] = defaultdict(list)
    errors = [
        {"at": format_ts(int(r["now_ms"])), **e} for r in facts.runs for e in (r.get("summary") or {}).get("errors", [])
    ]
    for run in facts.runs:
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
    by_table: dict[str, list[Reading]] = defaultdict(list)
    for _, reading, block in stored.values():
        by_table[block.table].append(reading)
    holding = {**exported, **by_table}
    misplaced = [
        {"table": t, "event_id": r.event_id, "belongs_in": layout.table_for(r.ts_ms)}
        for t, rs in holding.items()
        for r in rs
        if layout.table_for(r.ts_ms) != t
    ]
    dropped = [n for n in steps if "deleted" in when[n]]
    prebuilt = [n for n in steps if any(s["step"] == "prebuilt" for s in steps[n])]
    tables = [
        {
            "table": name,
            "period_start": format_ts(starts[name]) if name in starts else None,
            "steps": steps[name],
            "state": "dropped" if name in dropped else (phases[name] or ["not seen by the rotator"])[-1],
            "readings_stored": len(by_table.get(name, ())),
            **({"readings_in_its_export": len(exported[name])} if name in exported else {}),
            **({"capacity": dict(facts.capacity[name])} if name in facts.capacity else {}),
        }
        for name in sorted(set(steps) | set(holding), key=lambda n: (starts.get(n, 0), n))
    ]
    last = (facts.runs[-1].get("summary") or {}) if facts.runs else {}
    refused = _refused(facts.refused, rejects)
    checks = {
        "readings_landed_in_two_or_more_period_tables": sum(1 for rs in holding.values() if rs) >= 2,
        "every_reading_in_its_periods_table": not misplaced,
        "rotator_prebuilt_the_next_tables": bool(prebuilt)
        and int(last.get("periods_ready", 0)) >= 1 + config.prebuild_periods,
        "rotator_took_a_table_through_its_phases_to_its_drop": any(len(phases[n]) >= 2 for n in dropped),
        "rotator_dropped_a_table_past_retention": bool(dropped)
        and all(n in starts and when[n]["deleted"] >= period.next_start(starts[n]) + retention for n in dropped),
        "rotator_exported_each_table_before_dropping_it": config.export_bucket is None
        or all(n in exported and when[n].get("exported", math.inf) <= when[n]["deleted"] for n in dropped),
        "rotator_runs_without_errors": not errors and facts.failures == 0,
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
        "clock": dict(facts.clock),
        "runs": len(facts.runs),
        "failures": facts.failures,
        "export_bucket": config.export_bucket,
        "lifecycle": lifecycle,
        "tables": tables,
        "misplaced_examples": misplaced[:5],
        "refused_for_a_dropped_period": refused,
        "errors": errors[:20],
        "last_run": dict(last),
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


def _period_starts(facts: RotationFacts, config: Context) -> dict[str, int]:
    """Table name -> its period's start, from before the replay's start (less any table then alive) to a
    few periods past the last run."""
    layout = config.layout()
    if layout.table_period is None or not facts.runs:
        return {}
    times, nominal = [int(r["now_ms"]) for r in facts.runs], layout.table_period.nominal_ms
    low = min(times) - config.retention_ms - 2 * nominal
    high = max(times) + (config.prebuild_periods + 2) * nominal * 2
    return {layout.table_for(start): start for start in layout.table_period.starts(low, high)}


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


def table_writes(by_table: Mapping[str, Iterable[Reading]]) -> tuple[int, dict[str, list[int]]] | None:
    """Readings per :data:`SLICE_MS` of event time in each table: the first slice's start, and each table's
    counts from it. None when no table holds a reading."""
    counts = {name: c for name, rs in by_table.items() if (c := Counter(r.ts_ms // SLICE_MS for r in rs))}
    if not counts:
        return None
    first = min(min(c) for c in counts.values())
    width = max(max(c) for c in counts.values()) - first + 1
    return first * SLICE_MS, {name: [counts[name].get(first + n, 0) for n in range(width)] for name in sorted(counts)}
