"""``tsctl keys``: the block a reading is stored in (table, PK, SK), and the plan of a query."""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

from keydesign import InvalidInput, Layout, Reading, ShardMap, format_ts, parse_timestamp
from keydesign.layouts import QueryPlan
from tsctl.output import emit_json, table
from tsctl.seed import RETENTION_MS, VERSION


def register(sub: Any) -> None:
    p = sub.add_parser(
        "keys",
        help="preview the block a reading is stored in and the partitions a query reads",
        description=(
            "Show, before deploying, where a reading is written: the block ingest would pack it into if it "
            "were its entity's only reading in a batch (table, PK, block SK, item size, write units; blocks of "
            "more readings are sized by `tsctl plan`), its position in merged reads, and, with --from/--to, "
            "every partition a range query for its entity must read."
        ),
    )
    p.add_argument("--layout", default="hybrid", choices=["random", "calculated", "hybrid"])
    p.add_argument("--bucket", default="1h", help="bucket granularity (default: %(default)s)")
    p.add_argument("--shards", type=int, default=100, help="global shard count N (default: %(default)s)")
    p.add_argument("--table-prefix", default="readings", help="table name or prefix (default: %(default)s)")
    p.add_argument("--table-period", choices=["hour", "day", "week", "month"], help="one table per period")
    p.add_argument("--shard-map", type=Path, help="a shard map JSON file (overrides --shards)")
    p.add_argument("--entity", help="entity id of the reading (or use --reading)")
    p.add_argument("--timestamp", help="RFC 3339 or epoch ms (default: now)")
    p.add_argument("--event-id", help="event id (default: derived from the content)")
    p.add_argument("--measures", default='{"value": 1.0}', help="measures as JSON (default: %(default)s)")
    p.add_argument("--reading", help="a whole reading as a JSON object instead of the flags above")
    p.add_argument("--from", dest="from_", metavar="FROM", help="start of a query range (inclusive)")
    p.add_argument("--to", help="end of a query range (exclusive)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def layout_from_args(args: argparse.Namespace) -> tuple[Layout, ShardMap]:
    layout = Layout.from_settings(
        kind=args.layout, bucket=args.bucket, table_prefix=args.table_prefix, table_period=args.table_period
    )
    if args.shard_map:
        try:
            data = json.loads(args.shard_map.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInput("--shard-map", f"cannot read {args.shard_map}: {exc}") from None
        shard_map = ShardMap.from_dict(data)
        if shard_map.bucket != layout.bucket:
            raise InvalidInput("--shard-map", f"its bucket {shard_map.bucket.spec} differs from --bucket {args.bucket}")
    else:
        shard_map = ShardMap.initial(layout.bucket, args.shards)
    return layout, shard_map


def parse_reading(args: argparse.Namespace, now_ms: int) -> Reading:
    if args.reading:
        try:
            return Reading.parse(json.loads(args.reading))
        except json.JSONDecodeError as exc:
            raise InvalidInput("--reading", f"is not JSON: {exc.msg}") from None
    if not args.entity:
        raise InvalidInput("--entity", "is required (or pass --reading)")
    try:
        measures = json.loads(args.measures)
    except json.JSONDecodeError as exc:
        raise InvalidInput("--measures", f"is not JSON: {exc.msg}") from None
    raw: dict[str, object] = {
        "entity_id": args.entity,
        "timestamp": args.timestamp or format_ts(now_ms),
        "measures": measures,
    }
    if args.event_id:
        raw["event_id"] = args.event_id
    return Reading.parse(raw)


def describe_plan(plan: QueryPlan) -> dict[str, object]:
    return {
        "entity_id": plan.entity_id,
        "from": format_ts(plan.from_ms),
        "to": format_ts(plan.to_ms),
        "dedupe": plan.dedupe,
        "tables": list(plan.tables),
        "partition_count": len(plan.partitions),
        "partitions": [
            {
                "table": p.table,
                "pk": p.pk,
                "sk_between": [p.sk_low, p.sk_high] if p.sk_low is not None else None,
                "from": format_ts(p.from_ms),
                "to": format_ts(p.to_ms),
                "filter_on_time": p.time_filter,
            }
            for p in plan.partitions
        ],
    }


def run(args: argparse.Namespace) -> int:
    layout, shard_map = layout_from_args(args)
    reading = parse_reading(args, int(time.time() * 1000))
    # The random layout picks a random suffix; a seeded generator keeps the preview repeatable.
    (block,) = layout.pack([(reading, VERSION)], shard_map, retention_ms=RETENTION_MS, rng=random.Random(0))
    key = block.key
    result: dict[str, object] = {
        "layout": layout.kind,
        "bucket": layout.bucket.spec,
        "reading": reading.to_json(),
        "key": {"table": key.table, "pk": key.pk, "sk": key.sk},
        "position": layout.reading_key(reading.entity_id, reading.ts, reading.event_id),
        "item_bytes": block.size,
        "write_units": block.write_units,
    }
    if args.from_ or args.to:
        if not (args.from_ and args.to):
            raise InvalidInput("--from" if not args.from_ else "--to", "a query needs both --from and --to")
        plan = layout.plan_entity(
            reading.entity_id, parse_timestamp(args.from_, "--from"), parse_timestamp(args.to, "--to"), shard_map
        )
        result["query"] = describe_plan(plan)
    if args.json:
        emit_json(result)
    else:
        print(render(result))
    return 0


def render(result: dict[str, Any]) -> str:
    key = result["key"]
    lines = [
        f"layout {result['layout']}, bucket {result['bucket']}",
        table(
            [
                ["table", key["table"]],
                ["partition key", key["pk"]],
                ["block sort key", key["sk"]],
                ["position in reads", result["position"]],
                ["block of this reading alone (bytes)", result["item_bytes"]],
                ["write units", result["write_units"]],
            ]
        ),
    ]
    query = result.get("query")
    if query:
        lines.append("")
        lines.append(
            f"query {query['entity_id']} from {query['from']} to {query['to']}: "
            f"{query['partition_count']} partition(s) in {len(query['tables'])} table(s)"
            + (", a reading in two blocks read once (the newer block's)" if query["dedupe"] else "")
        )
        rows = [
            [p["table"], p["pk"], " .. ".join(p["sk_between"]) if p["sk_between"] else "(whole partition)"]
            for p in query["partitions"]
        ]
        lines.append(table(rows, ["table", "partition key", "sort key between"]))
    return "\n".join(lines)
