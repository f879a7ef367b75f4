"""``tsctl publish``: send readings to the Kinesis stream, from a file or a synthetic workload."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from infra.config import Context, load_cdk_json_context
from keydesign import InvalidInput, parse_duration, validate_entity_id
from producer.packing import DEFAULT_RECORD_BYTES, KINESIS_MAX_RECORD_BYTES, PARTITION_STRATEGIES, Packer
from producer.publisher import Publisher, PublishSummary, kinesis_client, publish
from producer.sources import InputError, read_csv, read_jsonl
from producer.synthetic import Workload, generate
from tsctl.arguments import instant, non_negative, parsed_by, positive_int
from tsctl.output import StatusLine, emit_json, table

#: The group strategy's keys when the deployment has no write tier.
UNGROUPED_KEYS = 256
CDK_JSON = Path(__file__).resolve().parents[2] / "cdk.json"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "publish",
        help="send readings to the Kinesis stream (file or synthetic workload)",
        description=(
            "Publish readings to a Kinesis data stream: from JSON Lines or CSV (--input), or a synthetic "
            "workload (--entities, --rate, --zipf, --hot, --duration). Readings are packed several to a "
            "record, records 500 to a PutRecords call, and only the records that fail are retried."
        ),
        epilog=(
            "examples:\n"
            "  tsctl publish --stream readings --input readings.jsonl\n"
            "  tsctl publish --stream readings --entities 10000 --rate 5000 --zipf 1.1 "
            "--hot sensor-alpha-001=2000 --duration 60s\n"
            "  tsctl publish --stream readings --endpoint-url http://127.0.0.1:5000 --rate 200 --duration 5s"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--stream", required=True, help="stream name or ARN")
    p.add_argument("--endpoint-url", help="Kinesis endpoint (local mode: the embedded moto server)")
    p.add_argument("--region", help="AWS region (default: from the environment)")

    source = p.add_argument_group("file input")
    source.add_argument("--input", metavar="PATH", help="JSON Lines or CSV file; '-' reads stdin")
    source.add_argument("--format", choices=["jsonl", "csv"], help="input format (default: from the file suffix)")

    synthetic = p.add_argument_group("synthetic workload (when there is no --input)")
    synthetic.add_argument("--entities", type=positive_int, default=100, help="entity count (default: %(default)s)")
    synthetic.add_argument("--rate", type=_rate, default=100.0, help="readings/s over all entities (default: 100)")
    synthetic.add_argument("--zipf", type=non_negative, default=0.0, help="Zipf skew; 0 is uniform (default: 0)")
    synthetic.add_argument(
        "--hot", type=_hot, action="append", default=[], metavar="ENTITY=RATE", help="a hot entity with its own rate"
    )
    synthetic.add_argument("--duration", type=_duration, default=10.0, help="e.g. 30s, 5m (default: 10s)")
    synthetic.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    synthetic.add_argument(
        "--start", type=instant("--start"), help="event time of the first reading, RFC 3339 or epoch ms (default: now)"
    )
    synthetic.add_argument(
        "--no-pace", action="store_true", help="send as fast as possible instead of at --rate in real time"
    )

    packing = p.add_argument_group("packing and sending")
    packing.add_argument(
        "--partition-key",
        choices=PARTITION_STRATEGIES,
        default="group",
        help="group: hash of the entity into --groups keys; entity: the entity id; random (default: %(default)s)",
    )
    packing.add_argument(
        "--groups",
        type=positive_int,
        help="keys of the group strategy (default: cdk.json's write_tier_groups, the write tier's groups; 256 if 0)",
    )
    packing.add_argument(
        "--max-record-bytes",
        type=positive_int,
        default=DEFAULT_RECORD_BYTES,
        help=f"pack readings into records up to this size (default: %(default)s, max {KINESIS_MAX_RECORD_BYTES})",
    )
    packing.add_argument("--linger-ms", type=positive_int, default=200, help="flush open records (default: 200)")
    packing.add_argument("--max-attempts", type=positive_int, default=8, help="per record (default: %(default)s)")
    packing.add_argument("--jitter-ms", type=int, default=0, help="random delay before each call (default: 0)")
    packing.add_argument("--no-validate", action="store_true", help="send readings without checking them first")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="machine-readable summary on stdout")
    p.set_defaults(func=run)


def _groups(args: argparse.Namespace) -> int:
    """The group strategy's key count: ``--groups``, or the deployment's write tier's (cdk.json), so that
    a Kinesis shard holds whole groups and each ingest batch writes few, full group items."""
    if args.groups is not None:
        return int(args.groups)
    groups = Context.parse(load_cdk_json_context(CDK_JSON)).write_tier_groups
    return groups or UNGROUPED_KEYS


def run(args: argparse.Namespace) -> int:
    try:
        packer = Packer(max_record_bytes=args.max_record_bytes, strategy=args.partition_key, groups=_groups(args))
    except ValueError as exc:
        raise InvalidInput("--max-record-bytes" if "record" in str(exc) else "--groups", str(exc)) from None
    publisher = Publisher(
        kinesis_client(endpoint_url=args.endpoint_url, region=args.region),
        args.stream,
        max_attempts=args.max_attempts,
        jitter_ms=args.jitter_ms,
    )
    status = StatusLine(sys.stderr)

    def progress(summary: PublishSummary, final: bool) -> None:
        rate = summary.readings_sent / summary.elapsed_s if summary.elapsed_s else 0.0
        status.show(
            f"sent {summary.readings_sent:,} readings in {summary.records_sent:,} records "
            f"({rate:,.0f}/s), retried {summary.records_retried:,}, failed {summary.records_failed:,}, "
            f"invalid {summary.readings_invalid:,}",
            final=final,
        )

    with ExitStack() as stack:
        if args.input is not None:
            defaults = {"entities": 100, "rate": 100.0, "zipf": 0.0, "hot": [], "duration": 10.0, "start": None}
            changed = [name for name, default in defaults.items() if getattr(args, name) != default]
            if changed:
                raise InvalidInput(
                    f"--{changed[0]}", "is a synthetic-workload option; it cannot be combined with --input"
                )
            items: Any = _file_items(args, stack)
            pace = False
        else:
            start = args.start if args.start is not None else int(time.time() * 1000)
            try:
                workload = Workload(
                    entities=args.entities,
                    rate=args.rate,
                    zipf=args.zipf,
                    hot=tuple(args.hot),
                    duration_s=args.duration,
                    seed=args.seed,
                    start_ms=start,
                )
            except ValueError as exc:
                raise InvalidInput("workload", str(exc)) from None
            items = generate(workload)
            pace = not args.no_pace
        try:
            summary = publish(
                items,
                publisher,
                packer,
                validate=not args.no_validate,
                pace=pace,
                linger_ms=args.linger_ms,
                progress=None if args.no_progress else progress,
            )
        except InputError as exc:
            raise InvalidInput("--input", str(exc)) from None
    if args.json:
        emit_json(summary.as_dict())
    else:
        rows: list[list[object]] = [
            ["readings sent", summary.readings_sent],
            ["readings failed", summary.readings_failed],
            ["readings invalid", summary.readings_invalid],
            ["records sent", summary.records_sent],
            ["records retried", summary.records_retried],
            ["records failed", summary.records_failed],
            ["PutRecords calls", summary.put_calls],
            ["seconds", summary.elapsed_s],
        ]
        print(table(rows, ["", "count"]))
        for example in summary.invalid_examples:
            print(f"invalid: {example}", file=sys.stderr)
        if summary.failure:
            print(f"failed: {summary.failure}", file=sys.stderr)
    return 0 if summary.readings_failed == 0 and summary.readings_invalid == 0 else 1


def _file_items(args: argparse.Namespace, stack: ExitStack) -> Any:
    if args.input == "-":
        stream = sys.stdin
        fmt = args.format or "jsonl"
    else:
        path = Path(args.input)
        try:
            stream = stack.enter_context(path.open(encoding="utf-8", newline=""))
        except OSError as exc:
            raise InvalidInput("--input", f"cannot open {path}: {exc.strerror}") from None
        fmt = args.format or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
    return read_csv(stream) if fmt == "csv" else read_jsonl(stream)


# -- argument types: a bad value exits 2 with one line naming the option ------------


def _rate(text: str) -> float:
    value = non_negative(text)
    if value > 1_000_000:
        raise argparse.ArgumentTypeError(f"{text} readings/s is more than one process can generate")
    return value


@parsed_by
def _duration(text: str) -> float:
    return float(text) if text.replace(".", "", 1).isdigit() else parse_duration(text, "--duration") / 1000


def _hot(text: str) -> tuple[str, float]:
    entity, sep, rate = text.partition("=")
    if not sep or not entity:
        raise argparse.ArgumentTypeError(f"{text!r} is not ENTITY=RATE (e.g. sensor-alpha-001=2000)")
    try:
        validate_entity_id(entity)
    except InvalidInput as exc:
        raise argparse.ArgumentTypeError(f"{entity!r}: {exc.reason}") from None
    value = _rate(rate)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the rate of {entity} must be positive")
    return entity, value
