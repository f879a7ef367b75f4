"""The demo driver: the seed scenario, scaled to one machine, through the real code path.

:func:`run_demo` starts the local system, publishes a synthetic workload with
the producer library (thousands of sensors, ``sensor-alpha-001`` far above the
others, plus a few readings that break the rules and records that are not
JSON), waits until the ingest function has drained the stream, and then
accounts for every reading from the outside: what the tables hold (a scan),
what the rejects queue holds, what the on-failure destination holds.

    lost = published - written - rejected      (must be 0)
    duplicates = readings stored more than once (must be 0)

The steps that need components still being written (hot-key detection and the
split, shard-map changes, queries through the HTTP API) appear in the report
as ``{"status": "not run", ...}``, never as numbers.

``python -m local_runtime.demo --help`` runs it by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from boto3.dynamodb.types import TypeDeserializer

from infra.config import PARTITION_WCU, AppConfig, load_cdk_json_context
from keydesign import format_ts, item_size, write_units
from local_runtime.faults import LocalFaults
from local_runtime.system import LocalOptions, LocalSystem
from producer import Packer, Publisher, PublishSummary, Workload, generate, kinesis_client, publish
from producer.publisher import Progress

REPO_ROOT = Path(__file__).resolve().parents[1]
HOT_SENSOR = "sensor-alpha-001"
NOT_RUN = "not run"


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """The scenario. The default publishes 30,000 readings over 6 s of event time: 3,000/s spread
    over 2,000 sensors and 2,000/s from ``sensor-alpha-001``, as the seed's hot sensor bursts."""

    sensors: int = 2_000
    base_rate: float = 3_000.0
    hot_rate: float = 2_000.0
    duration_s: float = 6.0
    #: Readings that break a rule (each kind in turn) and records that are not JSON at all.
    invalid_readings: int = 50
    garbage_records: int = 5
    seed: int = 7
    faults: LocalFaults = field(default_factory=LocalFaults)
    out_dir: Path = Path("out/demo")
    context: Mapping[str, object] = field(default_factory=dict)
    timeout_s: float = 600.0


def run_demo(options: DemoOptions | None = None, *, progress: TextIO | None = None) -> dict[str, Any]:
    """Run the demo; write ``<out_dir>/report.json``; return the report (``report["ok"]`` says if it passed)."""
    options = options or DemoOptions()
    say = _Say(progress or sys.stderr)
    config = AppConfig.from_context({**load_cdk_json_context(REPO_ROOT / "cdk.json"), **options.context})
    options.out_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    started = time.monotonic()

    say(f"starting the local system (faults: {options.faults.describe()})")
    local = LocalOptions(faults=options.faults, function_log=options.out_dir / "functions.log")
    with LocalSystem(config, local) as system:
        endpoints = system.endpoints
        timings["start"] = time.monotonic() - started
        table_list = ", ".join(endpoints.readings_tables)
        say(f"moto on {endpoints.endpoint_url}; stream {endpoints.stream_name}; tables {table_list}")

        mark = time.monotonic()
        now_ms = int(time.time() * 1000)
        workload = Workload(
            entities=options.sensors,
            rate=options.base_rate,
            hot=((HOT_SENSOR, options.hot_rate),) if options.hot_rate > 0 else (),
            duration_s=options.duration_s,
            seed=options.seed,
            start_ms=now_ms - int(options.duration_s * 1000) - 60_000,
        )
        say(f"publishing {workload.total:,} readings of {options.sensors:,} sensors + {HOT_SENSOR}")
        kinesis = kinesis_client(endpoint_url=endpoints.endpoint_url, region=endpoints.region)
        valid = publish(
            generate(workload), Publisher(kinesis, endpoints.stream_name), Packer(), progress=Progress(say.stream)
        )
        invalid = _publish_invalid(kinesis, endpoints.stream_name, options.invalid_readings, now_ms)
        garbage = _publish_garbage(kinesis, endpoints.stream_name, options.garbage_records)
        timings["publish"] = time.monotonic() - mark
        published = valid.readings_sent + invalid.readings_sent + garbage
        failed_to_publish = valid.readings_failed + invalid.readings_failed

        say(f"published {published:,} readings; waiting for ingest to drain the stream")
        mark = time.monotonic()
        drained = _wait_drained(system, options.timeout_s, say)
        timings["drain"] = time.monotonic() - mark
        say(f"stream drained in {timings['drain']:.1f} s" if drained else "the stream did NOT drain in time")

        mark = time.monotonic()
        say("counting what was stored, rejected and skipped")
        tables = system.readings_tables()
        stored = _scan(system.client("dynamodb"), tables)
        rejects = _drain_queue(system.client("sqs"), endpoints.rejects_queue_url)
        skipped = _drain_queue(system.client("sqs"), endpoints.ingest_failures_queue_url)
        timings["verify"] = time.monotonic() - mark
        runtime = system.stats()
    timings["total"] = time.monotonic() - started

    report = build_report(
        options=options,
        config=config,
        published=published,
        failed_to_publish=failed_to_publish,
        stored=stored,
        rejects=rejects,
        skipped=skipped,
        drained=drained,
        runtime=runtime,
        timings=timings,
        event_time=(workload.start_ms, workload.start_ms + int(options.duration_s * 1000)),
    )
    path = options.out_dir / "report.json"
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    say(f"report: {path} ({'OK' if report['ok'] else 'FAILED'}) in {timings['total']:.1f} s")
    return report


def build_report(
    *,
    options: DemoOptions,
    config: AppConfig,
    published: int,
    failed_to_publish: int,
    stored: list[dict[str, Any]],
    rejects: list[dict[str, Any]],
    skipped: list[dict[str, Any]],
    drained: bool,
    runtime: Mapping[str, Any],
    timings: Mapping[str, float],
    event_time: tuple[int, int],
) -> dict[str, Any]:
    """The report from what the system holds (pure: the unit tests feed it by hand)."""
    identities = Counter((str(item.get("e")), str(item.get("i"))) for item in stored)
    duplicates = sum(n - 1 for n in identities.values() if n > 1)
    written = len(identities)
    distinct_rejects: dict[str, dict[str, Any]] = {}
    for message in rejects:
        distinct_rejects.setdefault(str(message.get("reject_id")), message)
    by_reason = Counter(str(m.get("field")) for m in distinct_rejects.values())
    examples: dict[str, str] = {}
    for message in distinct_rejects.values():
        examples.setdefault(str(message.get("field")), str(message.get("reason")))
    lost = published - written - len(distinct_rejects)
    ok = drained and lost == 0 and duplicates == 0 and failed_to_publish == 0
    reason = "the hot-key handler is not wired into the local runtime yet"
    return {
        "ok": ok,
        "scenario": {
            "sensors": options.sensors,
            "base_readings_per_s": options.base_rate,
            "hot_sensor": HOT_SENSOR,
            "hot_sensor_readings_per_s": options.hot_rate,
            "event_time_from": format_ts(event_time[0]),
            "event_time_to": format_ts(event_time[1]),
            "invalid_readings": options.invalid_readings,
            "garbage_records": options.garbage_records,
            "faults": options.faults.describe(),
        },
        "design": {
            "layout": config.layout_kind,
            "shards": config.shards,
            "bucket": config.bucket,
            "table_period": config.table_period,
        },
        "readings": {
            "published": published,
            "failed_to_publish": failed_to_publish,
            "written": written,
            "rejected": len(distinct_rejects),
            "lost": lost,
            "duplicates": duplicates,
            "stream_drained": drained,
        },
        "rejected_by_reason": [
            {"field": name, "count": count, "example": examples[name]} for name, count in by_reason.most_common()
        ],
        "reject_messages": len(rejects),
        "skipped_by_event_source": {
            "batches": len(skipped),
            "records": sum(int(_batch_info(m).get("batchSize", 0)) for m in skipped),
            "conditions": dict(Counter(str(m.get("requestContext", {}).get("condition")) for m in skipped)),
        },
        "partition_load": partition_load(stored),
        "hot_keys": {"status": NOT_RUN, "reason": reason},
        "shard_map_changes": {"status": NOT_RUN, "reason": reason},
        "partition_load_after_split": {"status": NOT_RUN, "reason": reason},
        "queries": {"status": NOT_RUN, "reason": "the query handler is not wired into the local runtime yet"},
        "partition_load_picture": {"status": NOT_RUN, "reason": "drawn once the split can be shown"},
        "runtime": dict(runtime),
        "timings_s": {name: round(value, 2) for name, value in timings.items()},
    }


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


# -- publishing what ingest must reject --------------------------------------------


def invalid_readings(count: int, now_ms: int) -> list[dict[str, Any]]:
    """Readings that each break one rule, the kinds in turn."""
    kinds: list[Callable[[int], dict[str, Any]]] = [
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms, "measures": {"temp": "warm"}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "measures": {"temp": 1.0}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms + 86_400_000, "measures": {"temp": 1.0}},
        lambda n: {"entity_id": "", "timestamp": now_ms, "measures": {"temp": 1.0}},
        lambda n: {"entity_id": f"sensor-bad-{n}", "timestamp": now_ms, "measures": {"temp": 1.0}, "colour": "red"},
    ]
    return [kinds[n % len(kinds)](n) for n in range(count)]


def _publish_invalid(kinesis: Any, stream: str, count: int, now_ms: int) -> PublishSummary:
    items = [(0.0, reading) for reading in invalid_readings(count, now_ms)]
    return publish(items, Publisher(kinesis, stream), Packer(), validate=False)


def _publish_garbage(kinesis: Any, stream: str, count: int) -> int:
    """Records that are not JSON: each is one unit ingest must reject."""
    if count <= 0:
        return 0
    records = [{"Data": f"not json {n} \x00".encode(), "PartitionKey": f"garbage-{n}"} for n in range(count)]
    response = kinesis.put_records(StreamName=stream, Records=records)
    return count - int(response.get("FailedRecordCount", 0))


# -- looking at the system from the outside ---------------------------------------------


def _wait_drained(system: LocalSystem, timeout_s: float, say: _Say) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        if system.wait_until_idle(min(5.0, remaining)):
            return True
        stats = system.stats()["event_source_mappings"].get("ingest", {})
        say(
            f"  ingest: {stats.get('invocations', 0):,} invocations, "
            f"{stats.get('records_succeeded', 0):,}/{stats.get('records_received', 0):,} records done, "
            f"{stats.get('function_errors', 0):,} errors, {stats.get('bisections', 0):,} bisections"
        )


def _scan(dynamodb: Any, tables: Iterable[str]) -> list[dict[str, Any]]:
    deserialize = cast(Callable[[Any], Any], TypeDeserializer().deserialize)
    items: list[dict[str, Any]] = []
    for table in tables:
        for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
            items.extend({k: deserialize(v) for k, v in raw.items()} for raw in page.get("Items", []))
    return items


def _drain_queue(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    """Every message on the queue (received, not deleted: hidden for the visibility timeout)."""
    out: list[dict[str, Any]] = []
    for _ in range(100_000):  # bounded: at most a million messages
        page = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=3600)
        messages = page.get("Messages", [])
        if not messages:
            return out
        for message in messages:
            try:
                out.append(json.loads(message["Body"]))
            except ValueError:
                out.append({"unreadable": message["Body"][:200]})
    return out


def _batch_info(message: Mapping[str, Any]) -> Mapping[str, Any]:
    info = message.get("KinesisBatchInfo") or message.get("DDBStreamBatchInfo") or {}
    return info if isinstance(info, Mapping) else {}


class _Say:
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, text: str) -> None:
        self.stream.write(f"[demo] {text}\n")
        self.stream.flush()


def render(report: Mapping[str, Any]) -> str:
    """A short human summary of the report."""
    r = report["readings"]
    load = report["partition_load"]
    lines = [
        f"readings published {r['published']:,}, written {r['written']:,}, rejected {r['rejected']:,}, "
        f"lost {r['lost']:,}, duplicates {r['duplicates']:,}",
        "rejected by reason: "
        + (", ".join(f"{x['field']} {x['count']}" for x in report["rejected_by_reason"]) or "none"),
    ]
    if load.get("partition_keys"):
        lines.append(
            f"partition keys {load['partition_keys']:,}; hottest {load['hottest_key']} at "
            f"{load['hottest_peak_wcu_per_s']:,} WCU/s; {load['keys_over_1000_wcu_per_s']} over 1,000 WCU/s"
        )
    skipped = report["skipped_by_event_source"]
    if skipped["batches"]:
        lines.append(
            f"skipped by the event source mapping: {skipped['records']} record(s) in {skipped['batches']} batch(es)"
        )
    lines.extend(
        f"{name.replace('_', ' ')}: not run ({report[name]['reason']})"
        for name in ("hot_keys", "shard_map_changes", "queries")
        if report[name].get("status") == NOT_RUN
    )
    lines.append("OK" if report["ok"] else "FAILED: readings were lost or duplicated, or the stream did not drain")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = DemoOptions()
    parser = argparse.ArgumentParser(prog="python -m local_runtime.demo", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sensors", type=int, default=defaults.sensors)
    parser.add_argument("--base-rate", type=float, default=defaults.base_rate, help="readings/s of event time")
    parser.add_argument("--hot-rate", type=float, default=defaults.hot_rate, help=f"readings/s of {HOT_SENSOR}")
    parser.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds of event time")
    parser.add_argument("--faults", default="", help='e.g. "throttle=2,partial=3,fraction=0.5,invoke_errors=0.1"')
    parser.add_argument("--out", type=Path, default=defaults.out_dir)
    args = parser.parse_args(argv)
    try:
        faults = LocalFaults.parse(args.faults)
    except ValueError as exc:
        parser.error(str(exc))
    report = run_demo(
        DemoOptions(
            sensors=args.sensors,
            base_rate=args.base_rate,
            hot_rate=args.hot_rate,
            duration_s=args.duration,
            faults=faults,
            out_dir=args.out,
        )
    )
    print(render(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
