"""``tsctl publish``: send readings to the Kinesis stream, from a file or a synthetic workload, as our JSON or
as one of the agents ingest reads writes them (``--record-format``: Telegraf, the OpenTelemetry Collector, an
IoT Core topic rule), so a format can be tried without the agent."""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from infra.config import Context, load_cdk_json_context, parse_iot_topic_rule
from ingest.formats import TELEGRAF_JSON_UNITS
from keydesign import InvalidInput, parse_duration, validate_entity_id
from producer.formats import (
    COMPRESSIONS,
    DEFAULT_ENTITY_TAG,
    FORMATS,
    JSON,
    PARTITION_METHODS,
    AgentPacker,
    FormatUnavailable,
)
from producer.packing import (
    DEFAULT_RECORD_BYTES,
    KINESIS_MAX_RECORD_BYTES,
    PARTITION_STRATEGIES,
    Packer,
    RecordWriter,
)
from producer.publisher import Publisher, PublishSummary, kinesis_client, publish
from producer.sources import InputError, read_csv, read_jsonl
from producer.synthetic import Workload, generate
from tsctl.arguments import instant, non_negative, parsed_by, positive_int
from tsctl.output import StatusLine, emit_json, table

#: The group strategy's keys when the deployment has no write tier.
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
            "  tsctl publish --stream readings --endpoint-url http://127.0.0.1:5000 --rate 200 --duration 5s\n"
            "  tsctl publish --stream readings --record-format otlp_proto --compression gzip --entities 5 --rate 5"
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

    agents = p.add_argument_group("record format (what an agent would write; docs/ingest.md)")
    agents.add_argument(
        "--record-format",
        choices=FORMATS,
        default=JSON,
        help="json: our readings, packed; influx, telegraf_json: Telegraf's outputs.kinesis; otlp_proto, otlp_json: "
        "the OpenTelemetry Collector's awskinesisexporter; iot: what the IoT Core topic rule puts in "
        "(default: %(default)s)",
    )
    agents.add_argument(
        "--measurement", default="reading", help="Telegraf formats: the metric's name (default: %(default)s)"
    )
    agents.add_argument(
        "--entity-tag",
        help="Telegraf formats: the tag naming the entity (default: "
        f"{DEFAULT_ENTITY_TAG['influx']}); OTLP: the resource attribute (default: {DEFAULT_ENTITY_TAG['otlp_json']})",
    )
    agents.add_argument(
        "--timestamp-units",
        choices=TELEGRAF_JSON_UNITS,
        default="1s",
        metavar="UNITS",
        help="telegraf_json: Telegraf's json_timestamp_units, 1ns to 1s (default: %(default)s)",
    )
    agents.add_argument(
        "--compression", choices=COMPRESSIONS, default="none", help="OTLP formats (default: %(default)s)"
    )
    agents.add_argument(
        "--iot-topic-rule",
        type=_iot_rule,
        default=_iot_rule('{"topic_filter": "sensors/+/readings", "entity_level": 2}'),
        metavar="JSON",
        help='iot: cdk.json\'s iot_topic_rule (default: \'{"topic_filter": "sensors/+/readings", "entity_level": 2}\')',
    )

    packing = p.add_argument_group("packing and sending")
    packing.add_argument(
        "--partition-key",
        choices=PARTITION_STRATEGIES,
        help="json: group (default; hash of the entity into --groups keys), entity or random; influx and "
        "telegraf_json: entity (default; Telegraf's tag method on the entity tag) or random; OTLP: random (a UUID, "
        "as the Collector); iot: entity (the rule's ${topic(n)})",
    )
    packing.add_argument(
        "--groups",
        type=positive_int,
        help="keys of the group strategy (default: cdk.json's write_tier_groups, the write tier's groups)",
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
    return Context.parse(load_cdk_json_context(CDK_JSON)).write_tier_groups


def run(args: argparse.Namespace) -> int:
    packer = _writer(args)
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


def _writer(args: argparse.Namespace) -> RecordWriter:
    """Our JSON packer, or the agent's writer of ``--record-format``; a bad combination names the option."""
    if args.record_format == JSON:
        try:
            return Packer(
                max_record_bytes=args.max_record_bytes, strategy=args.partition_key or "group", groups=_groups(args)
            )
        except ValueError as exc:
            raise InvalidInput("--max-record-bytes" if "record" in str(exc) else "--groups", str(exc)) from None
    if args.partition_key not in (None, *PARTITION_METHODS[args.record_format]):
        methods = " or ".join(PARTITION_METHODS[args.record_format])
        raise InvalidInput("--partition-key", f"the {args.record_format} agent's partition key is {methods}")
    try:
        return AgentPacker(
            args.record_format,
            measurement=args.measurement,
            entity_tag=args.entity_tag,
            partition_key=args.partition_key,
            telegraf_json_unit=args.timestamp_units,
            compression=args.compression,
            iot_rule=args.iot_topic_rule,
        )
    except FormatUnavailable as exc:
        raise InvalidInput("--record-format", str(exc)) from None
    except ValueError as exc:
        options = {"compress": "--compression", "topic rule": "--iot-topic-rule"}
        option = next((o for word, o in options.items() if word in str(exc)), "--measurement")
        raise InvalidInput(option, str(exc)) from None


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


def _iot_rule(text: str) -> object:
    try:
        return parse_iot_topic_rule(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
