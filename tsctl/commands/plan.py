"""``tsctl plan``: capacity arithmetic for a described workload, in blocks, and its month in parts."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from keydesign import Ingest, InvalidInput, KeyDesignError, Prices, Reading, Workload, plan_capacity
from keydesign.capacity import PARTITION_WCU, SAMPLE_READING, CapacityPlan
from tsctl.arguments import positive_int
from tsctl.output import emit_json, table

#: The options that describe the stream and the ingest function: option -> (Ingest's field, help).
INGEST_OPTIONS = {
    "--batching-window": (
        "batching_window_s",
        "ingest's MaximumBatchingWindowInSeconds, 0-300 (default: %(default)s, cdk.json's)",
    ),
    "--stream-shards": ("shards", "Kinesis shards (%(default)s)"),
    "--kinesis-mode": ("kinesis_mode", "(%(default)s)"),
    "--parallelization": ("parallelization", "(%(default)s)"),
    "--batch-size": ("batch_size", "records a batch (%(default)s)"),
    "--record-bytes": ("record_bytes", "Kinesis record size the producer packs readings into (%(default)s)"),
    "--lambda-memory": ("memory_mb", "ingest memory, MB (%(default)s)"),
    "--lambda-ms-per-reading": ("ms_per_reading", "ingest's billed ms a reading (%(default)s)"),
}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="write units and bytes per reading, shards, sub-shards, table period and monthly cost for a workload",
        description=(
            "Size a workload stored in blocks: how many readings share a block (an entity's readings in one "
            "ingest batch: its rate times the batching window, cut at 10 s, 1,000 readings and 64 KB), the write "
            "units and bytes each reading costs (measured by packing representative readings), the hybrid "
            "layout's global shards N and hot-entity sub-shards, the table period from the 10 GB partition rule, "
            "the write tier's groups, and the monthly cost in parts with the write tier on: group items, "
            "entities' own blocks, dense marks, compacted blocks, the re-pack's sub-items, rollups (compaction's "
            "group partials and totals, the rollup function's), compaction's reads (the re-pack's too), the "
            "compaction and rollup Lambdas, queries, "
            "the Kinesis stream and the ingest Lambda. "
            "Default prices are us-east-1 list prices; pass your own."
        ),
    )
    p.add_argument("--peak-writes", type=float, required=True, help="peak readings per second, all entities")
    p.add_argument("--avg-writes", type=float, help="average readings per second (default: the peak)")
    p.add_argument("--entities", type=int, help="number of entities (sensors), hot ones included")
    p.add_argument(
        "--hot", action="append", default=[], metavar="ENTITY=RATE", help="a hot entity and its peak readings/s"
    )
    sample = {"entity_id": SAMPLE_READING.entity_id, "measures": dict(SAMPLE_READING.measures)}
    shown = json.dumps(sample).replace("%", "%%")  # argparse formats help with %
    p.add_argument(
        "--reading",
        metavar="JSON",
        help=f"a typical reading, whose shape is packed to measure blocks (default: {shown})",
    )
    p.add_argument("--reading-bytes", type=float, help="compressed bytes a reading adds to a block, if you know it")
    p.add_argument("--item-bytes", type=int, help="size every block as one reading of this many bytes")
    for option, (name, help_text) in INGEST_OPTIONS.items():
        default = getattr(Ingest(), name)
        choices = ["on_demand", "provisioned"] if name == "kinesis_mode" else None
        p.add_argument(option, type=type(default), choices=choices, default=default, help=help_text)
    p.add_argument("--reads-per-s", type=float, default=0.0, help="queries per second")
    p.add_argument("--readings-per-read", type=float, default=1.0, help="readings one query returns")
    p.add_argument("--retention-days", type=float, default=30.0, help="how long readings are kept")
    p.add_argument("--utilisation", type=float, default=0.5, help="target share of a key's 1,000 WCU/s")
    p.add_argument("--headroom", type=float, default=0.05, help="share of a 10 GiB partition kept free")
    p.add_argument("--shards", type=positive_int, help="also evaluate an existing design with this many shards")
    p.add_argument(
        "--write-tier-groups",
        type=int,
        metavar="G",
        help="the write tier's groups (default: G auto, the fewest, a power of two and at least 16, whose "
        "10 minutes of items stay within 64 KB: set cdk.json's write_tier_groups to it)",
    )
    for price in dataclasses.fields(Prices):
        p.add_argument(f"--price-{price.name.replace('_', '-')}", type=float, default=price.default)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def entity_rate(value: str, shape: str) -> tuple[str, float]:
    """A ``--hot`` value's entity and rate; ``shape`` is how the option's help writes it."""
    name, sep, rate = value.partition("=")
    if not sep or not name:
        raise InvalidInput("--hot", f"{value!r} is not {shape}")
    try:
        return name, float(rate)
    except ValueError:
        raise InvalidInput("--hot", f"rate {rate!r} of {name} is not a number") from None


def parse_sample(text: str | None) -> Reading:
    """``--reading`` as a reading (its timestamp may be left out: only its shape counts)."""
    if text is None:
        return SAMPLE_READING
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput("--reading", f"is not JSON: {exc.msg}") from None
    if isinstance(raw, dict):
        raw.setdefault("timestamp", SAMPLE_READING.ts_ms)
    try:
        return Reading.parse(raw)
    except KeyDesignError as exc:
        raise InvalidInput("--reading", str(exc)) from None


def evaluate_design(plan: CapacityPlan, workload: Workload, shards: int) -> dict[str, object]:
    """Per-key load of a hybrid design with ``shards`` keys and no sub-shards.

    The hottest key carries its share of the spread traffic plus the hottest entity
    hashed onto it (assume the worst: it lands on it), in blocks as the plan sizes them.
    """
    hot = [plan.blocks_of(entity).wcu for entity in workload.hot_entities]
    hottest_entity = max(hot, default=0.0)
    spread = (plan.peak_wcu - hottest_entity) / shards
    hottest_key = spread + hottest_entity
    return {
        "shards": shards,
        "mean_key_wcu": round(plan.peak_wcu / shards, 1),
        "hottest_key_wcu": round(hottest_key, 1),
        "times_key_limit": round(hottest_key / PARTITION_WCU, 2),
        "throttles": hottest_key > PARTITION_WCU,
    }


def run(args: argparse.Namespace) -> int:
    workload = Workload(
        peak_writes_per_s=args.peak_writes,
        avg_writes_per_s=args.avg_writes,
        entities=args.entities,
        hot_entities=dict(entity_rate(value, "ENTITY=RATE") for value in args.hot),
        sample=parse_sample(args.reading),
        reading_bytes=args.reading_bytes,
        item_bytes=args.item_bytes,
        ingest=Ingest(
            **{name: getattr(args, option[2:].replace("-", "_")) for option, (name, _) in INGEST_OPTIONS.items()}
        ),
        reads_per_s=args.reads_per_s,
        readings_per_read=args.readings_per_read,
        retention_days=args.retention_days,
        utilisation=args.utilisation,
        partition_headroom=args.headroom,
        write_tier_groups=args.write_tier_groups,
    )
    prices = Prices(**{f.name: getattr(args, f"price_{f.name}") for f in dataclasses.fields(Prices)})
    plan = plan_capacity(workload, prices)
    existing = evaluate_design(plan, workload, args.shards) if args.shards else None
    if args.json:
        emit_json({"plan": plan.to_dict(), "existing_design": existing, "context": deploy_context(workload, plan)})
        return 0
    context = " ".join(f"-c {key}={value}" for key, value in deploy_context(workload, plan).items())
    print(f"{render_plan(workload, plan.to_dict(), existing)}\ndeploy with: npx aws-cdk@2 deploy {context}")
    return 0


def deploy_context(workload: Workload, plan: CapacityPlan) -> dict[str, object]:
    """The cdk.json keys the plan sizes, for ``cdk deploy -c key=value``: the stack's defaults are the seed
    scenario's, so another workload deploys these (docs/configuration.md)."""
    days = workload.retention_days
    context: dict[str, object] = {
        "shards": plan.global_shards,
        "bucket": plan.bucket,
        "table_period": plan.table_period,
        "retention": f"{days:g}d" if days == int(days) else f"{round(days * 24)}h",
        "ingest_batching_window_s": f"{workload.ingest.batching_window_s:g}",
        "write_tier_groups": plan.write_tier.groups if plan.write_tier else None,
    }
    if workload.ingest.kinesis_mode == "provisioned":
        context |= {"kinesis_mode": "provisioned", "kinesis_shards": max(plan.stream.shards, plan.stream.shards_needed)}
    return {key: value for key, value in context.items() if value is not None}


def _count(value: float) -> str:
    """A count of readings or units: whole ones as such, small means to three figures."""
    return f"{value:,.0f}" if value >= 100 or value == int(value) else f"{value:.3g}"


def _usd(part: dict[str, Any], column: int) -> float:
    """A part's month on-demand (column 0) or provisioned (1), from its costs by kind."""
    return float(sum(v[column] for v in part.values() if isinstance(v, list | tuple)))


def render_plan(workload: Workload, plan: dict[str, Any], existing: dict[str, object] | None) -> str:
    """The plan for people: the batch, the blocks, the keys, the month in parts."""
    stream = plan["stream"]
    batch = [
        ["batching window (s)", workload.ingest.batching_window_s],
        ["batch length (s)", round(stream["batch_s"], 2)],
        ["ingest invocations/s", round(stream["invocations_per_s"], 1)],
        ["readings per invocation", f"{stream['readings_per_invocation']:,.0f}"],
    ]
    blocks = [
        [
            b["entity"],
            _count(b["readings_per_s"]),
            _count(b["readings_per_batch"]),
            _count(b["readings_per_block"]),
            round(b["block_bytes"]),
            _count(b["write_units_per_block"]),
            f"{b['write_units_per_reading']:.4f}",
            round(b["bytes_stored_per_reading"], 1),
            round(b["wcu"], 2),
            round(b["burst_wcu"]),
        ]
        for b in plan["blocks"]
    ]
    rows: list[list[object]] = [
        ["write units per reading in blocks (sizes the keys)", f"{plan['write_units_per_reading']:.4f}"],
        ["bytes stored per reading in blocks (item + 100)", plan["bytes_stored_per_reading"]],
        ["peak write units/s in blocks", plan["peak_wcu"]],
        ["budget per key (WCU/s)", plan["key_budget_wcu"]],
        ["global shards N", plan["global_shards"]],
        ["load per shard (WCU/s)", plan["load_per_shard_wcu"]],
    ]
    for entity, subs in plan["entity_shards"].items():
        rows.append([f"sub-shards for {entity}", subs])
    rows += [
        [f"hottest key ({plan['hottest_key']}), WCU/s", plan["hottest_key_wcu"]],
        ["hours to fill a 10 GiB partition", plan["fill_hours"]],
        ["table period", plan["table_period"] or "none fits: shard further"],
        ["bucket", plan["bucket"]],
        ["stored data (GiB)", plan["monthly_storage_gb"]],
    ]
    sections = [
        table(batch, ["batch", "value"]),
        table(
            blocks,
            [
                "entity",
                "readings/s",
                "per batch",
                "per block",
                "block B",
                "WCU/block",
                "WCU/reading",
                "B stored/reading",
                "WCU/s",
                "burst WCU",
            ],
        ),
        table(rows, ["figure", "value"]),
    ]
    tier = plan.get("write_tier")
    if tier:
        tier_rows = [
            ["groups G" + (" (auto)" if tier["auto"] else ""), tier["groups"]],
            ["readings/s to group items (entities under 8 a batch)", _count(tier["sparse_readings_per_s"])],
            ["readings/s to their own blocks (8 or more a batch)", _count(tier["dense_readings_per_s"])],
            ["readings per group item", _count(tier["readings_per_item"])],
            ["group item bytes", round(tier["item_bytes"])],
            ["group items/s", round(tier["items_per_s"], 1)],
            ["dense marks/s", round(tier["dense_marks_per_s"], 2)],
        ]
        sections.append(table(tier_rows, ["write tier (ingest)", "value"]))
    parts = [p for p in plan["parts"] if _usd(p, 0) or _usd(p, 1)]  # what this deployment pays for
    cost = [
        [
            p["part"],
            f"{p['write_units_per_reading']:.5f}",
            f"{p['read_units_per_reading']:.5f}",
            round(p["bytes_at_rest_per_reading"], 1),
            round(_usd(p, 0), 2),
            round(_usd(p, 1), 2),
        ]
        for p in parts
    ]
    on, prov = plan["monthly_ondemand"], plan["monthly_provisioned"]
    cost.append(
        [
            "total",
            f"{sum(p['write_units_per_reading'] for p in parts):.5f}",
            f"{sum(p['read_units_per_reading'] for p in parts):.5f}",
            round(sum(p["bytes_at_rest_per_reading"] for p in parts), 1),
            on["total"],
            prov["total"],
        ]
    )
    sections.append(
        table(
            cost,
            ["part (a month)", "WU/reading", "RU/reading", "B/reading at rest", "on-demand $", "provisioned $"],
        )
    )
    kinds = [[kind.replace("_", " "), float(on[kind]), float(prov[kind])] for kind in on if on[kind] or prov[kind]]
    sections.append(table(kinds, ["monthly cost (USD)", "table on-demand", "table provisioned"]))
    text = "\n\n".join(sections)
    if existing:
        verdict = "THROTTLES" if existing["throttles"] else "fits"
        text += (
            f"\n\nexisting design with N={existing['shards']}: mean {existing['mean_key_wcu']:,} WCU/s per key, "
            f"hottest key {existing['hottest_key_wcu']:,} WCU/s = {existing['times_key_limit']}x "
            f"the 1,000 WCU/s limit -> {verdict}"
        )
    for note in plan["notes"]:
        text += f"\nnote: {note}"
    return text
