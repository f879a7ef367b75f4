"""``tsctl preview``: the seed scenario, planned and packed into blocks, with the numbers computed (no server).

At full scale and in seconds; ``tsctl demo`` runs the same story on the local
system and includes this report's capacity plan in its own.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from keydesign import Ingest, Layout, ShardMap, earliest_change_boundary, format_ts, plan_capacity
from tsctl import seed
from tsctl.commands.keys import describe_plan
from tsctl.commands.plan import evaluate_design, render_plan
from tsctl.output import emit_json, table

CACHE_TTL_MS = 60_000


def register(sub: Any) -> None:
    p = sub.add_parser(
        "preview",
        help="the seed scenario through the planner and the key design, computed (no server)",
        description=(
            "The seed scenario (10,000 sensors, 50,000 readings/s of three measures, sensor-alpha-001 "
            f"bursting to 2,000/s, ingest batches of the stack's {Ingest().batching_window_s:g} s window): the "
            "capacity plan, the write load on every partition key (WCU/s) when one batch of traffic is packed "
            "into blocks under the seed's N=16 design and the planned one (and after sensor-alpha-001's split, "
            "if the plan gives it sub-shards), and the query plan of a read of it."
        ),
    )
    p.add_argument("--out", type=Path, default=Path("out/preview"), help="where report.json goes")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = build_report(int(time.time() * 1000))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=2))
    if args.json:
        emit_json(report)
    else:
        print(render(report, args.out / "report.json"))
    return 0 if report["all_readings_found_by_their_plan"] else 1


def build_report(now_ms: int) -> dict[str, Any]:
    with _no_cycle_collection():
        return _report(now_ms)


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The report holds a million readings and 30,000 blocks, none of them in a reference cycle; the
    cyclic collector went over them again and again as they were made (15% of the report's CPU)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _report(now_ms: int) -> dict[str, Any]:
    workload = seed.workload()
    plan = plan_capacity(workload)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    n = plan.global_shards
    subs = plan.entity_shards.get(seed.HOT_SENSOR, 1)

    # A split is scheduled the way the hot-key detector does it: at the first
    # bucket boundary every writer's cache will have seen.
    boundary = earliest_change_boundary(layout.bucket, now_ms, CACHE_TTL_MS)
    sized = ShardMap.initial(layout.bucket, n)
    planned = sized.with_entity(seed.HOT_SENSOR, subs, boundary, now_ms=now_ms) if subs > 1 else sized

    # One ingest batch as the planner sizes it (the window, unless Lambda's payload cuts it short), in
    # whole seconds of traffic; it starts on a bucket boundary so all of it falls in one bucket.
    seconds = max(1, round(plan.stream.batch_s))
    before = seed.traffic(layout.bucket.start(now_ms), seconds)
    loads = [
        seed.key_load("seed design: hybrid N=16", layout, ShardMap.initial(layout.bucket, 16), before, seconds),
        seed.key_load(f"hybrid N={n}", layout, planned, before, seconds),
    ]
    if subs > 1:
        after = seed.traffic(boundary, seconds)
        loads.append(seed.key_load(f"hybrid N={n}, {seed.HOT_SENSOR} in {subs}", layout, planned, after, seconds))

    # Every block, before and after a split, must be found by its entity's plan.
    window_from, window_to = layout.bucket.start(now_ms), boundary + layout.bucket.width_ms
    plans: dict[str, set[str]] = {}
    found = checked = 0
    for load in loads[1:]:
        for block in load.blocks:
            if block.entity_id not in plans:
                plans[block.entity_id] = {
                    p.pk for p in layout.plan_entity(block.entity_id, window_from, window_to, planned).partitions
                }
            checked += len(block.readings)
            found += len(block.readings) if block.key.pk in plans[block.entity_id] else 0
    hot_plan = layout.plan_entity(seed.HOT_SENSOR, boundary - 30 * 60_000, boundary + 30 * 60_000, planned)
    hot = plan.blocks_of(seed.HOT_SENSOR)

    return {
        "scenario": {
            "sensors": seed.SENSORS,
            "readings_per_s": seed.GLOBAL_RATE,
            "hot_sensor": seed.HOT_SENSOR,
            "hot_sensor_rate": seed.HOT_RATE,
            "batching_window_s": workload.ingest.batching_window_s,
            "batch_s": seconds,
            "reading": {"measures": sorted(workload.sample.measures), "event_id": "derived"},
        },
        "plan": plan.to_dict(),
        "seed_design_n16": evaluate_design(plan, workload, 16),
        "split": {
            "entity": seed.HOT_SENSOR,
            "sub_shards": subs,
            "effective_from": format_ts(boundary) if subs > 1 else None,
            "wcu": round(hot.wcu, 1),
            "readings_per_block": hot.readings_per_block,
        },
        "key_load": [load.summary() for load in loads],
        "readings_checked": checked,
        "readings_found_by_their_plan": found,
        "all_readings_found_by_their_plan": found == checked,
        "query_hot_sensor": describe_plan(hot_plan),
        "shard_map": planned.to_dict(),
    }


def render(report: dict[str, Any], path: Path) -> str:
    s, split = report["scenario"], report["split"]
    out = [
        f"Seed scenario: {s['sensors']:,} sensors, {s['readings_per_s']:,} readings/s of "
        f"{len(s['reading']['measures'])} measures, {s['hot_sensor']} bursting to {s['hot_sensor_rate']:,}/s, "
        f"ingest batches of {s['batching_window_s']:g} s",
        "",
        "1. Capacity plan (tsctl plan)",
        render_plan(seed.workload(s["batching_window_s"]), report["plan"], report["seed_design_n16"]),
        "",
        f"2. Write load on every partition key when one {s['batch_s']:g} s ingest batch is packed into blocks "
        "(key by key; WCU/s = the batch's write units over its seconds)",
        table(
            [
                [r["design"], r["partition_keys"], r["blocks"], r["hottest_wcu"], r["mean_wcu"], r["keys_over_1000"]]
                for r in report["key_load"]
            ],
            ["design", "keys", "blocks", "hottest WCU/s", "mean WCU/s", "keys > 1,000"],
        ),
        "",
    ]
    if split["sub_shards"] > 1:
        out.append(
            f"3. {split['entity']} split into {split['sub_shards']} sub-shards from {split['effective_from']} "
            f"(first boundary after every writer's {CACHE_TTL_MS // 1000}s cache)"
        )
    else:
        out.append(
            f"3. {split['entity']} needs no sub-shards: blocks of {split['readings_per_block']:,.0f} readings, "
            f"{split['wcu']:,} WCU/s"
        )
    out += [
        f"   readings found by their entity's query plan: {report['readings_found_by_their_plan']:,} of "
        f"{report['readings_checked']:,}",
        "",
        "4. Query plan for the hot sensor, 30 minutes either side of the next boundary",
    ]
    q = report["query_hot_sensor"]
    out.append(table([[p["pk"], p["from"], p["to"]] for p in q["partitions"]], ["partition key", "from", "to"]))
    out += ["", f"report: {path}"]
    return "\n".join(out)
