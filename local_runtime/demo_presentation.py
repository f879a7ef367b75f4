"""The demo's presentation: the summary on stdout and the two pictures, from the report and the facts.

:mod:`local_runtime.demo_report` decides what passed; this module only shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra.config import AppConfig
from keydesign import format_ts, parse_timestamp
from local_runtime.demo_report import HOT_SENSOR, NOT_RUN, DemoFacts
from local_runtime.demo_rotation import RotationFacts, draw_table_writes, table_writes
from local_runtime.load_chart import chart_data, draw


def draw_pictures(facts: DemoFacts, config: AppConfig, out_dir: Path) -> None:
    """Partition load (``partition-load.png``) and, with rotation, table writes (``table-writes.png``)."""
    if facts.stored:
        facts.picture = _draw(facts, config, out_dir / "partition-load.png")
    if facts.rotation is not None:
        facts.rotation_picture = _draw_tables(facts.rotation, out_dir / "table-writes.png")


def _draw(facts: DemoFacts, config: AppConfig, path: Path) -> dict[str, Any]:
    story = facts.story_from_ms
    chart = chart_data(
        [i for i in facts.stored if story is None or parse_timestamp(str(i["t"]), "t") >= story],
        layout_kind=config.layout().kind,
        threshold_wcu=config.hot_split_threshold_wcu,
        boundary_ms=facts.boundary_ms,
    )
    if chart is None:
        return {}
    split = f"; {HOT_SENSOR} split at {format_ts(facts.boundary_ms)}" if facts.boundary_ms is not None else ""
    draw(chart, path, title=f"Write units per event-time second, hottest partition keys{split}")
    return {"path": str(path), **chart.as_dict()}


def _draw_tables(rotation: RotationFacts, path: Path) -> dict[str, Any]:
    by_table = {**rotation.exported_by_table, **rotation.stored_by_table}
    caught_up = None
    if rotation.runs and rotation.clock.get("caught_up_after_s") is not None:
        # The first run on the wall clock is the first after the catch-up.
        replayed = [int(r["now_ms"]) for r in rotation.runs]
        caught_up = max(replayed[:-1], default=None)
    chart = table_writes(by_table, runs=rotation.runs, caught_up_ms=caught_up)
    if chart is None:
        return {}
    draw_table_writes(chart, path, title="Readings per table over event time, and what the rotator did to each")
    return {"path": str(path), **chart.as_dict()}


# -- the summary on stdout ------------------------------------------------------------------------------


def render(report: Mapping[str, Any]) -> str:
    """A short human summary of the report."""
    r = report["readings"]
    s = report["scenario"]
    d = report["design"]
    exported = r.get("exported_then_dropped", 0)
    lines = [
        f"Local demo: {s.get('sensors', 0):,} sensors + {HOT_SENSOR} (faults: {s.get('faults', 'none')})",
        f"  time compressed: {d['bucket']} buckets, shard-map cache {d['shard_map_cache_ttl_s']} s, "
        f"MAX_FUTURE {d['max_future']}" + (f", hot-key windows {d['hot_window']}" if d.get("hot_window") else ""),
        f"readings: published {r['published']:,}, written {r['written']:,}"
        + (f" (+{exported:,} in the exports of dropped tables)" if exported else "")
        + f", rejected {r['rejected']:,}, lost {r['lost']:,}, duplicates {r['duplicates']:,}",
        "  rejected by reason: "
        + (", ".join(f"{x['field']} {x['count']}" for x in report["rejected_by_reason"]) or "none"),
    ]
    skipped = report["skipped_by_event_source"]
    if skipped["batches"]:
        lines.append(
            f"  skipped by the ingest mapping: {skipped['records']} record(s) in {skipped['batches']} batch(es)"
        )
    lines.extend(_render_hot_keys(report))
    lines.extend(_render_load(report))
    rollups = report.get("rollups", {})
    if rollups.get("through"):
        lines.append(
            f"rollups: applied through {rollups['through']} once the streams drained; {rollups.get('runs', 1)} "
            f"run(s) ({rollups.get('failed_runs', 0)} failed, their figures unseen) recomputed "
            f"{sum(rollups.get('recomputed', {}).values()):,} interval(s) in {rollups.get('steps', 0)} step(s), "
            f"read {rollups.get('raw_items_read', 0):,} raw item(s); {rollups.get('late', 0)} late mark(s) "
            "in the last run (readings older than ROLLUP_LATENESS on arrival, left raw)"
        )
    elif "checks" in report and "rollups_applied" in report["checks"]:
        lines.append(f"rollups: NOT applied ({rollups.get('reason')})")
    lines.extend(_render_queries(report["queries"]))
    picture = report.get("partition_load_picture", {})
    if picture.get("path"):
        lines.append(f"picture: {picture['path']}")
    lines.extend(_render_rotation(report.get("rotation", {})))
    failed = [name.replace("_", " ") for name, passed in report["checks"].items() if not passed]
    total = report.get("timings_s", {}).get("total")
    suffix = f" in {total:.0f} s" if isinstance(total, int | float) else ""
    lines.append(("OK" + suffix) if report["ok"] else "FAILED: " + "; ".join(failed))
    return "\n".join(lines)


def _render_rotation(rotation: Mapping[str, Any]) -> list[str]:
    if rotation.get("status") == NOT_RUN:
        return [f"rotation: not run ({rotation['reason']})"]
    if not rotation:
        return []
    life = rotation["lifecycle"]
    clock = rotation.get("clock", {})
    lines = [
        f"rotation: {rotation['period']} tables, the rotator {rotation['schedule']}; {rotation['runs']} run(s), "
        f"replaying {clock.get('replayed_hours', '?')} h in {clock.get('caught_up_after_s', '?')} s, "
        "then on the wall clock",
        f"  {life['tables']} tables, {life['with_readings']} with readings; prebuilt {len(life['prebuilt'])}, "
        f"dialled down {len(life['dialled_down'])}, exported {len(life['exported'])}, dropped {len(life['dropped'])}",
    ]
    for table in rotation["tables"]:
        steps = [s["step"] for s in table["steps"] if not s["step"].startswith(("set up", "phase"))]
        held = f"{table.get('readings_stored', 0):,} readings"
        if "readings_in_its_export" in table:
            held = f"{table['readings_in_its_export']:,} readings in its export"
        lines.append(f"  {table['table']}: {table['state']}; {held}; " + (" -> ".join(steps) or "-"))
    refused = rotation["refused_for_a_dropped_period"]
    if refused["published"]:
        reason = refused["reasons"][0]["reason"] if refused["reasons"] else "not rejected"
        lines.append(
            f"  ingest refused {refused['rejected']} of {refused['published']} reading(s) for dropped "
            f"{refused['table']}: {reason}"
        )
    if rotation.get("picture", {}).get("path"):
        lines.append(f"  picture: {rotation['picture']['path']}")
    return lines


def _render_hot_keys(report: Mapping[str, Any]) -> list[str]:
    hot = report["hot_keys"]
    lines = [f"hot keys: {hot['windows_with_hot_keys']} of {hot['windows_judged']} judged window(s) had one"]
    first = hot.get("first_detection")
    if first and first["hot_keys"]:
        key = first["hot_keys"][0]
        lines.append(f"  first: {key['pk']} at {key['wcu_per_s']:,.0f} WCU/s in the window from {first['window']}")
    lines.extend(f"  alert: {a['subject']}" for a in hot["alerts"][:3])
    split = report["shard_map_changes"]
    if split.get("status") == NOT_RUN:
        lines.append(f"shard map: not read ({split['reason']})")
        return lines
    lines.extend(
        f"shard map: {c['entity']} {c['from_sub_shards']} -> {c['to_sub_shards']} sub-shard(s) "
        f"from {c['effective_from']}"
        for c in split["changes"]
    )
    if not split["changes"]:
        lines.append("shard map: unchanged (no split)")
    return lines


def _render_load(report: Mapping[str, Any]) -> list[str]:
    lines = ["partition load (WCU per event-time second, from the stored items):"]
    for label, name in (
        ("before the split", "partition_load_before_split"),
        ("after the split", "partition_load_after_split"),
    ):
        load = report[name]
        if load.get("status") == NOT_RUN or not load.get("partition_keys"):
            lines.append(f"  {label}: {load.get('reason', 'no readings')}")
            continue
        lines.append(
            f"  {label}: {load['partition_keys']:,} keys; hottest {load['hottest_key']} at "
            f"{load['hottest_peak_wcu_per_s']:,} WCU/s; {load['keys_over_1000_wcu_per_s']} over 1,000"
        )
    hot = report["hot_sensor_after_split"]
    if hot.get("status") != NOT_RUN:
        lines.append(
            f"  {HOT_SENSOR} after the split: {hot['readings']:,} readings on {hot['sub_shard_keys']} sub-shard "
            f"key(s), {hot['off_sub_shard_keys']} elsewhere"
        )
    placement = report["placement"]
    if placement.get("status") != NOT_RUN:
        lines.append(
            f"  placement: {placement['checked']:,} readings checked against the key design, "
            f"{placement['misplaced']} misplaced"
        )
    return lines


def _render_queries(queries: Mapping[str, Any]) -> list[str]:
    if queries.get("status") == NOT_RUN:
        return [f"queries: not run ({queries['reason']})"]
    lines = [f"queries through {queries.get('api_url')} (local mode: no SigV4):"]
    for check in queries.get("checks", []):
        verdict = "equal to what was published" if check["equal"] else f"DIFFERENT ({check.get('difference')})"
        latency = check["latency_ms"]
        lines.append(
            f"  {check['name']}: {check['summary']}; {verdict}; {check['requests']} request(s), "
            f"p50 {latency['p50']:.0f} ms, max {latency['max']:.0f} ms"
        )
    return lines
