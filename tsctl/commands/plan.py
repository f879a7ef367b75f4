"""``tsctl plan``: capacity arithmetic for a described workload."""

from __future__ import annotations

import argparse
from typing import Any

from keydesign import InvalidInput, Prices, Workload, plan_capacity
from keydesign.capacity import PARTITION_WCU
from keydesign.items import write_units
from tsctl.output import emit_json, table

_DEFAULT_PRICES = Prices()


def register(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="shard count, hot-entity sub-shards, table period and monthly cost for a workload",
        description=(
            "Size the hybrid layout for a workload: global shards N so every key stays under the "
            "utilisation target of 1,000 WCU/s, dedicated sub-shards for hot entities, the table "
            "period from the 10 GB partition rule, and the monthly cost on-demand vs provisioned. "
            "Default prices are us-east-1 list prices (Nov 2024); pass your own."
        ),
    )
    p.add_argument("--peak-writes", type=float, required=True, help="peak readings per second, all entities")
    p.add_argument("--avg-writes", type=float, help="average readings per second (default: the peak)")
    p.add_argument("--item-bytes", type=int, required=True, help="stored item size in bytes (see `tsctl keys`)")
    p.add_argument("--entities", type=int, help="number of entities (sensors)")
    p.add_argument(
        "--hot", action="append", default=[], metavar="ENTITY=RATE", help="a hot entity and its peak readings/s"
    )
    p.add_argument("--reads-per-s", type=float, default=0.0, help="queries per second")
    p.add_argument("--items-per-read", type=float, default=1.0, help="items one query returns")
    p.add_argument("--retention-days", type=float, default=30.0, help="how long readings are kept")
    p.add_argument("--utilisation", type=float, default=0.5, help="target share of a key's 1,000 WCU/s")
    p.add_argument("--headroom", type=float, default=0.05, help="share of a 10 GiB partition kept free")
    p.add_argument("--shards", type=int, help="also evaluate an existing design with this many shards")
    p.add_argument("--price-write-million", type=float, default=_DEFAULT_PRICES.ondemand_write_per_million)
    p.add_argument("--price-read-million", type=float, default=_DEFAULT_PRICES.ondemand_read_per_million)
    p.add_argument("--price-wcu-hour", type=float, default=_DEFAULT_PRICES.provisioned_wcu_hour)
    p.add_argument("--price-rcu-hour", type=float, default=_DEFAULT_PRICES.provisioned_rcu_hour)
    p.add_argument("--price-gb-month", type=float, default=_DEFAULT_PRICES.storage_gb_month)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def parse_hot(values: list[str]) -> dict[str, float]:
    hot: dict[str, float] = {}
    for value in values:
        name, sep, rate = value.partition("=")
        if not sep or not name:
            raise InvalidInput("--hot", f"{value!r} is not ENTITY=RATE")
        try:
            hot[name] = float(rate)
        except ValueError:
            raise InvalidInput("--hot", f"rate {rate!r} of {name} is not a number") from None
    return hot


def evaluate_design(workload: Workload, shards: int) -> dict[str, object]:
    """Per-key load of a hybrid design with ``shards`` keys and no sub-shards.

    The hottest key carries its share of the spread traffic plus every hot
    entity hashed onto it (assume the worst: the hottest entity lands on it).
    """
    if shards < 1:
        raise InvalidInput("--shards", "must be at least 1")
    wcu = write_units(workload.item_bytes)
    mean = workload.peak_writes_per_s * wcu / shards
    hottest_entity = max(workload.hot_entities.values(), default=0.0) * wcu
    spread = (workload.peak_writes_per_s * wcu - hottest_entity) / shards
    hottest_key = spread + hottest_entity
    return {
        "shards": shards,
        "mean_key_wcu": round(mean, 1),
        "hottest_key_wcu": round(hottest_key, 1),
        "times_key_limit": round(hottest_key / PARTITION_WCU, 2),
        "throttles": hottest_key > PARTITION_WCU,
    }


def run(args: argparse.Namespace) -> int:
    workload = Workload(
        peak_writes_per_s=args.peak_writes,
        avg_writes_per_s=args.avg_writes,
        item_bytes=args.item_bytes,
        entities=args.entities,
        hot_entities=parse_hot(args.hot),
        reads_per_s=args.reads_per_s,
        items_per_read=args.items_per_read,
        retention_days=args.retention_days,
        utilisation=args.utilisation,
        partition_headroom=args.headroom,
    )
    prices = Prices(
        ondemand_write_per_million=args.price_write_million,
        ondemand_read_per_million=args.price_read_million,
        provisioned_wcu_hour=args.price_wcu_hour,
        provisioned_rcu_hour=args.price_rcu_hour,
        storage_gb_month=args.price_gb_month,
    )
    plan = plan_capacity(workload, prices)
    existing = evaluate_design(workload, args.shards) if args.shards else None
    if args.json:
        emit_json({"plan": plan.to_dict(), "existing_design": existing})
        return 0
    print(render_plan(workload, plan.to_dict(), existing))
    return 0


def render_plan(workload: Workload, plan: dict[str, Any], existing: dict[str, object] | None) -> str:
    rows: list[list[object]] = [
        ["write units per item", plan["wcu_per_item"]],
        ["peak write units/s", plan["peak_wcu"]],
        ["budget per key (WCU/s)", plan["key_budget_wcu"]],
        ["global shards N", plan["global_shards"]],
        ["load per shard (WCU/s)", plan["load_per_shard_wcu"]],
    ]
    for entity, subs in plan["entity_shards"].items():
        rate = workload.hot_entities[entity]
        rows.append([f"sub-shards for {entity}", f"{subs}  ({rate:,.0f}/s -> {rate / subs:,.0f}/s each)"])
    rows += [
        ["hours to fill a 10 GiB partition", plan["fill_hours"]],
        ["table period", plan["table_period"] or "none fits: shard further"],
        ["stored data (GiB)", plan["monthly_storage_gb"]],
        ["monthly cost, on-demand (USD)", plan["monthly_cost_ondemand"]],
        ["monthly cost, provisioned at peak (USD)", plan["monthly_cost_provisioned"]],
    ]
    text = table(rows, ["figure", "value"])
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
