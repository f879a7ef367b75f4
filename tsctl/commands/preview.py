"""``tsctl preview``: the seed scenario, planned and keyed, with the numbers computed (no server).

At full scale (10,000 sensors, 50,000 readings/s) and in a fraction of a
second: the capacity plan, the write load on every partition key, the split
of the hot sensor and the query plan across it, all by the key-design layer.
``tsctl demo`` runs the same story on the local system and includes this
report's capacity plan in its own.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from keydesign import Layout, ShardMap, earliest_change_boundary, format_ts, plan_capacity
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
            "The seed scenario (10,000 sensors, 50,000 readings/s, sensor-alpha-001 bursting to "
            "2,000/s): the capacity plan, the write load on every partition key under the seed's "
            "N=16 design, a correctly sized design, and the same after sensor-alpha-001 is split, "
            "and the query plan of a read across the split."
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
    workload = seed.workload()
    plan = plan_capacity(workload)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    n = plan.global_shards

    # The split is scheduled the way the hot-key detector does it: at the first
    # bucket boundary every writer's cache will have seen.
    boundary = earliest_change_boundary(layout.bucket, now_ms, CACHE_TTL_MS)
    sized = ShardMap.initial(layout.bucket, n)
    split = sized.with_entity(seed.HOT_SENSOR, plan.entity_shards[seed.HOT_SENSOR], boundary, now_ms=now_ms)

    before = seed.one_second(layout.bucket.start(now_ms))
    after = seed.one_second(boundary)
    loads = [
        seed.key_load("seed design: hybrid N=16", layout, ShardMap.initial(layout.bucket, 16), before),
        seed.key_load(f"hybrid N={n}, before the split", layout, split, before),
        seed.key_load(f"hybrid N={n}, after the split", layout, split, after),
    ]

    # Every reading, before and after the split, must be found by its entity's plan.
    window_from, window_to = layout.bucket.start(now_ms), boundary + layout.bucket.width_ms
    plans: dict[str, set[str]] = {}
    found = 0
    for reading in before + after:
        key = layout.key_for(reading, split)
        if reading.entity_id not in plans:
            plans[reading.entity_id] = {
                p.pk for p in layout.plan_entity(reading.entity_id, window_from, window_to, split).partitions
            }
        found += key.pk in plans[reading.entity_id]
    hot_plan = layout.plan_entity(seed.HOT_SENSOR, boundary - 30 * 60_000, boundary + 30 * 60_000, split)

    return {
        "scenario": {
            "sensors": seed.SENSORS,
            "readings_per_s": seed.GLOBAL_RATE,
            "hot_sensor": seed.HOT_SENSOR,
            "hot_sensor_rate": seed.HOT_RATE,
            "item_bytes": seed.ITEM_BYTES,
        },
        "plan": plan.to_dict(),
        "seed_design_n16": evaluate_design(workload, 16),
        "split": {
            "entity": seed.HOT_SENSOR,
            "sub_shards": plan.entity_shards[seed.HOT_SENSOR],
            "effective_from": format_ts(boundary),
        },
        "key_load": [load.summary() for load in loads],
        "readings_checked": len(before) + len(after),
        "readings_found_by_their_plan": found,
        "all_readings_found_by_their_plan": found == len(before) + len(after),
        "query_across_split": describe_plan(hot_plan),
        "shard_map_after_split": split.to_dict(),
    }


def render(report: dict[str, Any], path: Path) -> str:
    s = report["scenario"]
    out = [
        f"Seed scenario: {s['sensors']:,} sensors, {s['readings_per_s']:,} readings/s of ~{s['item_bytes']} B, "
        f"{s['hot_sensor']} bursting to {s['hot_sensor_rate']:,}/s",
        "",
        "1. Capacity plan (tsctl plan)",
        render_plan(seed.workload(), report["plan"], report["seed_design_n16"]),
        "",
        "2. Write load on every partition key during one second of traffic (computed key by key)",
        table(
            [
                [r["design"], r["partition_keys"], r["hottest_wcu"], r["mean_wcu"], r["keys_over_1000"]]
                for r in report["key_load"]
            ],
            ["design", "keys", "hottest WCU/s", "mean WCU/s", "keys > 1,000"],
        ),
        "",
        f"3. {report['split']['entity']} split into {report['split']['sub_shards']} sub-shards from "
        f"{report['split']['effective_from']} (first boundary after every writer's {CACHE_TTL_MS // 1000}s cache)",
        f"   readings found by their entity's query plan: {report['readings_found_by_their_plan']:,} of "
        f"{report['readings_checked']:,}",
        "",
        "4. Query plan for the hot sensor, 30 minutes either side of the split",
    ]
    q = report["query_across_split"]
    out.append(table([[p["pk"], p["from"], p["to"]] for p in q["partitions"]], ["partition key", "from", "to"]))
    out += ["", f"report: {path}"]
    return "\n".join(out)
