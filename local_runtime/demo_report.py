"""The demo's report, built from what was observed (pure: no AWS calls; the unit tests feed it by hand).

Everything in it is counted from the outside of the running system, never
taken from the functions' own claims:

* readings: published (by the demo's producer), written (a scan of the
  tables, by identity ``(entity, event id)``), rejected (distinct messages on
  the rejects queue), skipped (the on-failure queues); ``lost = published -
  written - rejected`` and duplicates must both be 0;
* hot keys: the windows the detector judged (its ``close#`` items in the
  control table, with the decisions it recorded) and the alerts it sent (an
  SQS queue subscribed to the topic);
* shard-map changes: the map item in the control table before and after;
* partition load: write units per partition key per event-time second, from
  the stored items, before and after the split's boundary; and where every
  stored reading sits compared with where the key design puts it under the
  final shard map;
* queries: the comparisons of :mod:`local_runtime.query_checks`.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from infra.config import PARTITION_WCU, AppConfig
from keydesign import Layout, Reading, ShardMap, format_ts, item_size, parse_timestamp, write_units
from keydesign.layouts import key_family
from local_runtime.demo_rotation import RotationFacts, rotation_section

HOT_SENSOR = "sensor-alpha-001"
NOT_RUN = "not run"


@dataclass(frozen=True, slots=True)
class Phase:
    """One stretch of publishing: its name, event-time range and readings."""

    name: str
    from_ms: int
    to_ms: int
    readings: int
    hot_readings: int


@dataclass(frozen=True, slots=True)
class StoredMap:
    """The shard-map item of the control table at one moment."""

    shard_map: ShardMap
    updated_at: str
    reason: str

    @classmethod
    def from_item(cls, item: Mapping[str, Any]) -> StoredMap:
        """From the item as the (deserialised) control table holds it: ``map`` JSON, ``updated_at``, ``reason``."""
        return cls(
            shard_map=ShardMap.from_dict(json.loads(str(item["map"]))),
            updated_at=str(item.get("updated_at", "")),
            reason=str(item.get("reason", "")),
        )

    def describe(self) -> dict[str, Any]:
        m = self.shard_map
        return {
            "version": m.version,
            "updated_at": self.updated_at,
            "reason": self.reason,
            "global": [
                {"shards": c.shards, "effective_from": format_ts(c.effective_from_ms)} for c in m.global_history
            ],
            "entities": {
                entity: [{"sub_shards": c.shards, "effective_from": format_ts(c.effective_from_ms)} for c in history]
                for entity, history in sorted(m.entity_history.items())
            },
        }


@dataclass(slots=True)
class DemoFacts:
    """What the demo observed; :func:`build_report` turns it into the report."""

    published: int
    failed_to_publish: int
    phases: Sequence[Phase]
    #: Every valid reading the demo published, as sent (for placement and query checks).
    ledger: Sequence[Mapping[str, Any]]
    stored: Sequence[Mapping[str, Any]]
    rejects: Sequence[Mapping[str, Any]]
    skipped: Sequence[Mapping[str, Any]]
    drained: bool
    hot_keys_skipped: Sequence[Mapping[str, Any]] = ()
    map_before: StoredMap | None = None
    map_after: StoredMap | None = None
    #: The detector's judged windows: ``{"window": ts, "summary": <its JSON summary, parsed>}``.
    windows: Sequence[Mapping[str, Any]] = ()
    #: Hot-key notifications: ``{"subject": ..., "body": {...}}``.
    alerts: Sequence[Mapping[str, Any]] = ()
    #: When the hot sensor's split took effect (None: no split happened).
    boundary_ms: int | None = None
    queries: Mapping[str, Any] | None = None
    #: The rollup function's last run once the streams drained, or why it did not get there (None: off).
    rollups: Mapping[str, Any] | None = None
    picture: Mapping[str, Any] | None = None
    #: With a table period: what the rotator did, and what it left (None: no rotation ran).
    rotation: RotationFacts | None = None
    rotation_picture: Mapping[str, Any] | None = None
    #: Readings no longer in a table because the rotator dropped it, read back from its export.
    exported: Sequence[Mapping[str, Any]] = ()
    #: Where the demo's story (published in real time) begins; readings before it are the rotation's
    #: replayed history, left out of the partition-load figures (None: no history).
    story_from_ms: int | None = None
    runtime: Mapping[str, Any] = field(default_factory=dict)
    timings: Mapping[str, float] = field(default_factory=dict)


def build_report(
    *,
    scenario: Mapping[str, Any],
    config: AppConfig,
    facts: DemoFacts,
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report; ``report["ok"]`` is every check in ``report["checks"]``."""
    identities = Counter((str(item.get("e")), str(item.get("i"))) for item in facts.stored)
    in_exports = Counter((str(item.get("e")), str(item.get("i"))) for item in facts.exported)
    duplicates = sum(n - 1 for n in (identities + in_exports).values() if n > 1)
    written = len(identities)
    exported = len(set(in_exports) - set(identities))
    distinct_rejects: dict[str, Mapping[str, Any]] = {}
    for message in facts.rejects:
        distinct_rejects.setdefault(str(message.get("reject_id")), message)
    by_reason = Counter(str(m.get("field")) for m in distinct_rejects.values())
    examples: dict[str, str] = {}
    for message in distinct_rejects.values():
        examples.setdefault(str(message.get("field")), str(message.get("reason")))
    lost = facts.published - written - exported - len(distinct_rejects)

    layout = config.layout()
    boundary = facts.boundary_ms
    split = _split_section(facts, layout) if facts.map_after is not None else None
    story = [i for i in facts.stored if facts.story_from_ms is None or _ts(i) >= facts.story_from_ms]
    before_items = [i for i in story if boundary is None or _ts(i) < boundary]
    after_items = [i for i in story if boundary is not None and _ts(i) >= boundary]
    load_after = partition_load(after_items) if boundary is not None else _not_run("the hot sensor was not split")
    hot_after = hot_sensor_after_split(after_items, layout) if boundary is not None else None
    placement = (
        placement_check(facts.stored, facts.ledger, layout, facts.map_after.shard_map) if facts.map_after else None
    )

    checks: dict[str, bool] = {
        "nothing_lost": lost == 0 and facts.failed_to_publish == 0,
        "no_duplicates": duplicates == 0,
        "stream_drained": facts.drained,
        "hot_entity_split": bool(split and split["hot_entity_split"]),
        "no_key_over_1000_wcu_after_split": bool(
            boundary is not None and load_after.get("keys_over_1000_wcu_per_s", 1) == 0
        ),
        "post_split_readings_on_sub_shards": bool(
            hot_after is not None and hot_after["readings"] > 0 and hot_after["off_sub_shard_keys"] == 0
        ),
        "every_reading_where_the_key_design_puts_it": bool(placement is not None and placement["misplaced"] == 0),
        "queries_equal_to_published": bool(facts.queries and facts.queries.get("all_equal")),
    }
    if facts.rollups is not None:
        checks["rollups_applied"] = "through" in facts.rollups
    rotation: dict[str, Any] = _not_run("no table_period: one readings table, nothing to rotate")
    if facts.rotation is not None:
        rotation, rotation_checks = rotation_section(facts.rotation)
        if facts.rotation_picture:
            rotation["picture"] = dict(facts.rotation_picture)
        checks.update(rotation_checks)
    return {
        "ok": all(checks.values()),
        "checks": checks,
        "scenario": dict(scenario),
        "design": {
            "layout": config.layout_kind,
            "shards": config.shards,
            "bucket": config.bucket,
            "table_period": config.table_period,
            "shard_map_cache_ttl_s": config.shard_map_cache_ttl_s,
            "max_future": config.max_future,
            "hot_split_threshold_wcu": config.hot_split_threshold_wcu,
            **dict(settings or {}),
        },
        "readings": {
            "published": facts.published,
            "failed_to_publish": facts.failed_to_publish,
            "written": written,
            "exported_then_dropped": exported,
            "rejected": len(distinct_rejects),
            "lost": lost,
            "duplicates": duplicates,
            "stream_drained": facts.drained,
            "phases": [
                {
                    "phase": p.name,
                    "readings": p.readings,
                    "sensor_alpha_001_readings": p.hot_readings,
                    "event_time_from": format_ts(p.from_ms),
                    "event_time_to": format_ts(p.to_ms),
                }
                for p in facts.phases
            ],
        },
        "rejected_by_reason": [
            {"field": name, "count": count, "example": examples[name]} for name, count in by_reason.most_common()
        ],
        "reject_messages": len(facts.rejects),
        "skipped_by_event_source": _skipped(facts.skipped),
        "hot_key_batches_skipped": _skipped(facts.hot_keys_skipped),
        "hot_keys": hot_keys_section(facts.windows, facts.alerts),
        "shard_map_changes": split if split is not None else _not_run("the shard map was not read"),
        "partition_load": partition_load(story),
        "partition_load_before_split": partition_load(before_items),
        "partition_load_after_split": load_after,
        "hot_sensor_after_split": hot_after if hot_after is not None else _not_run("the hot sensor was not split"),
        "placement": placement if placement is not None else _not_run("the shard map was not read"),
        "queries": dict(facts.queries) if facts.queries is not None else _not_run("the query API was not served"),
        "rollups": dict(facts.rollups) if facts.rollups is not None else _not_run("rollups are off"),
        "partition_load_picture": dict(facts.picture) if facts.picture else _not_run("no picture was drawn"),
        "rotation": rotation,
        "runtime": dict(facts.runtime),
        "timings_s": {name: round(value, 2) for name, value in facts.timings.items()},
    }


def _not_run(reason: str) -> dict[str, Any]:
    return {"status": NOT_RUN, "reason": reason}


def _ts(item: Mapping[str, Any]) -> int:
    return parse_timestamp(str(item["t"]), "t")


def _skipped(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "batches": len(messages),
        "records": sum(int(_batch_info(m).get("batchSize", 0)) for m in messages),
        "conditions": dict(Counter(str(m.get("requestContext", {}).get("condition")) for m in messages)),
    }


def _batch_info(message: Mapping[str, Any]) -> Mapping[str, Any]:
    info = message.get("KinesisBatchInfo") or message.get("DDBStreamBatchInfo") or {}
    return info if isinstance(info, Mapping) else {}


# -- partition load ---------------------------------------------------------------------------


def partition_load(items: Iterable[Mapping[str, Any]], top: int = 10) -> dict[str, Any]:
    """Write units per second on every partition key, by event-time second, from the stored items."""
    per_second: dict[str, Counter[str]] = defaultdict(Counter)
    count: Counter[str] = Counter()
    hot_keys: set[str] = set()
    for item in items:
        pk = str(item["pk"])
        per_second[pk][str(item.get("t", ""))[:19]] += write_units(item_size(item))
        count[pk] += 1
        if item.get("e") == HOT_SENSOR:
            hot_keys.add(pk)
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
        "top": [{"pk": pk, "peak_wcu_per_s": peak, "items": count[pk]} for pk, peak in ranked[:top]],
    }


def hot_sensor_after_split(items: Iterable[Mapping[str, Any]], layout: Layout) -> dict[str, Any]:
    """Where the hot sensor's readings from the boundary on were stored: on its own sub-shard keys."""
    families: Counter[str] = Counter()
    off = 0
    readings = 0
    for item in items:
        if item.get("e") != HOT_SENSOR:
            continue
        readings += 1
        family = key_family(str(item["pk"]), layout.kind)
        if f"#{HOT_SENSOR}#" in family:
            families[family] += 1
        else:
            off += 1
    return {
        "readings": readings,
        "sub_shard_keys": len(families),
        "readings_per_sub_shard_key": dict(sorted(families.items())),
        "off_sub_shard_keys": off,
    }


def placement_check(
    stored: Iterable[Mapping[str, Any]],
    ledger: Iterable[Mapping[str, Any]],
    layout: Layout,
    shard_map: ShardMap,
) -> dict[str, Any]:
    """Every stored reading's partition key compared with the one the key design gives it under the
    final shard map (whose history says which count applied at each instant)."""
    published = {(str(r["entity_id"]), str(r["event_id"])): r for r in ledger}
    checked = misplaced = unknown = 0
    examples: list[dict[str, str]] = []
    for item in stored:
        reading = published.get((str(item.get("e")), str(item.get("i"))))
        if reading is None:
            unknown += 1
            continue
        checked += 1
        expected = layout.key_for(Reading.parse(reading), shard_map).pk
        if expected != item["pk"]:
            misplaced += 1
            if len(examples) < 5:
                examples.append({"event_id": str(item.get("i")), "stored_pk": str(item["pk"]), "expected_pk": expected})
    return {"checked": checked, "misplaced": misplaced, "not_in_ledger": unknown, "examples": examples}


# -- hot keys and the shard map ---------------------------------------------------------------------


def hot_keys_section(windows: Sequence[Mapping[str, Any]], alerts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The detector's judged windows (from the control table) and its notifications."""
    hot_windows: list[dict[str, Any]] = []
    for window in sorted(windows, key=lambda w: str(w.get("window"))):
        summary = window.get("summary") or {}
        keys = summary.get("hot_keys") or []
        if keys or summary.get("splits"):
            hot_windows.append(
                {
                    "window": str(window.get("window")),
                    "hot_keys": [{"pk": str(k), "wcu_per_s": float(rate)} for k, rate in keys],
                    "splits": [
                        {"entity": e, "from_shards": a, "to_shards": b, "effective_from": f}
                        for e, a, b, f in summary.get("splits") or []
                    ],
                }
            )
    detected = sorted({k["pk"] for w in hot_windows for k in w["hot_keys"]})
    return {
        "windows_judged": len(windows),
        "windows_with_hot_keys": len(hot_windows),
        "hot_keys_detected": detected,
        "first_detection": hot_windows[0] if hot_windows else None,
        "windows": hot_windows[:20],
        "alerts": [
            {"subject": str(a.get("subject")), **{k: v for k, v in dict(a.get("body") or {}).items() if k != "window"}}
            for a in alerts
        ],
    }


def _split_section(facts: DemoFacts, layout: Layout) -> dict[str, Any]:
    after = facts.map_after
    assert after is not None  # noqa: S101 - the caller checked
    before = facts.map_before
    before_entities = before.shard_map.entity_history if before is not None else {}
    changes: list[dict[str, Any]] = []
    for entity, history in sorted(after.shard_map.entity_history.items()):
        known = len(before_entities.get(entity, ()))
        previous = before_entities[entity][-1].shards if known else 1
        for change in history[known:]:
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
