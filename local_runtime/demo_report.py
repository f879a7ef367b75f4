"""The demo's report, its checks, its summary and its two pictures, from what was observed (no AWS calls:
the unit tests feed it by hand). docs/local.md ("The report") says what each field holds."""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.blocks import ITEM_OVERHEAD_BYTES, Deployment, old_item
from infra.config import Context
from keydesign import Layout, Reading, ShardMap, decode_block, format_ts, item_size, write_units
from keydesign.blocks import block_item
from keydesign.capacity import PARTITION_WCU
from keydesign.layouts import key_family, parse_keys
from keydesign.periods import format_duration

HOT_SENSOR = "sensor-alpha-001"
NOT_RUN = "not run"
SLICE_MS = 5 * 60_000  # the table-writes picture counts readings per 5 minutes of event time
OTHERS = "every other key (peak)"
LOAD_BASIS = "each block's write units at the second of its first reading"
Copies = dict[tuple[str, int, str], tuple[int, Reading, "Block"]]


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
    def from_item(cls, table: str, item: Mapping[str, Any], layout: Layout) -> Block:
        """From an item as a DynamoDB client returns it; ValueError when it is not a block."""
        pk, sk, payload = item["pk"]["S"], item["sk"]["S"], item["b"]["B"]
        if (parts := parse_keys(pk, sk, layout.kind)) is None:
            raise ValueError(f"{table}: {pk} / {sk} is not a block's key")
        header, readings = decode_block(parts.entity, payload)
        size = item_size(block_item(pk, sk, payload, int(item["ttl"]["N"]) if "ttl" in item else None))
        return cls(table, pk, parts.write_units, size, header.version, tuple(readings))


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
        placement = placement_check(stored.values(), [r for _, r in facts.ledger], layout, shard_map(facts.map_after))
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
    deployment = Deployment(
        layout, initial, config.retention_ms, config.kinesis_shards, config.ingest_batching_window_s
    )
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
            "all": cost(facts.blocks, deployment),
            HOT_SENSOR: cost([b for b in facts.blocks if b.entity == HOT_SENSOR], deployment),
        },
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


def cost(blocks: Sequence[Block], deployment: Deployment) -> dict[str, Any]:
    """Write units and billed bytes per reading of ``blocks`` (every copy they hold paid for), beside one
    item per reading (``benchmarks.blocks.old_item``) for the same readings, once each."""
    if not (n := len(readings := [r for _, r, _ in newest_copies(blocks).values()])):
        return {"readings": 0}
    items = [item_size(old_item(r, deployment)) for r in readings]
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
    stored: Iterable[tuple[int, Reading, Block]], ledger: Iterable[Mapping[str, Any]], layout: Layout, final: ShardMap
) -> dict[str, Any]:
    """Each published reading's block key against the keys the key design gives a block holding it under
    the final shard map (whose history says which count applied at each instant)."""
    published = {(str(r["entity_id"]), str(r["event_id"])) for r in ledger}
    everything = [(r, b) for _, r, b in stored]
    checked = [(r, b) for r, b in everything if (r.entity_id, r.event_id) in published]
    wrong = [(r, b) for r, b in checked if b.pk not in layout.partitions_of(r.entity_id, r.ts_ms, final)]
    return {
        "checked": len(checked),
        "misplaced": len(wrong),
        "not_in_ledger": len(everything) - len(checked),
        "examples": [{"event_id": r.event_id, "stored_pk": b.pk} for r, b in wrong[:5]],
    }


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
    layout, prefix, runs = config.layout(), f"{config.table_prefix}-", facts["runs"]
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
    if report["rollups"].get("through"):
        lines.append(f"rollups: applied through {report['rollups']['through']}")
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
