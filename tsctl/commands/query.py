"""``tsctl query``: read through the query API (the deployed one, signed, or the local one)."""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import sys
import time
from collections.abc import Iterable
from typing import IO, Any

from client import ApiError, QueryClient, Reading, ReadingStream, flat_reading
from keydesign import InvalidInput
from tsctl.arguments import positive_int
from tsctl.output import StatusLine, emit_json, table

FORMATS = ("table", "jsonl", "csv")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "query",
        help="read readings, latest values and aggregates through the query API",
        description=(
            "Read through the query API with the project's client: SigV4-signed against the deployed API "
            "(--stack-name resolves its ApiUrl output, or give --api-url), unsigned against the local one. "
            "Pages are followed to the end (or --max-readings); 429/503 answers are retried."
        ),
        epilog=(
            "examples:\n"
            "  tsctl query readings --api-url $API --entity sensor-alpha-001 --from 2026-11-22T06:00:00Z "
            "--to 2026-11-22T07:00:00Z\n"
            "  tsctl query latest --stack-name TimeSeriesIngest --entity sensor-alpha-001\n"
            "  tsctl query aggregates --api-url $API --entity sensor-alpha-001 --from ... --to ... --interval 15m\n"
            "  tsctl query range --api-url $API --from ... --to ... --format csv > readings.csv"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    routes = p.add_subparsers(dest="route", required=True, metavar="ROUTE")
    readings = _route(routes, "readings", "one entity's readings in [from, to)")
    _range(readings)
    latest = _route(routes, "latest", "the newest reading of one entity")
    latest.add_argument("--lookback", help="how far back to look, e.g. 15m, 6h, 7d (default: the deployment's)")
    aggregates = _route(routes, "aggregates", "count/min/max/avg/sum per interval of one entity")
    aggregates.add_argument("--from", dest="from_", required=True, help="start, RFC 3339 or epoch ms (inclusive)")
    aggregates.add_argument("--to", required=True, help="end, RFC 3339 or epoch ms (exclusive)")
    aggregates.add_argument("--interval", required=True, help="interval length: 90s, 15m, 1h, 1d...")
    aggregates.add_argument("--stats", help="comma list of count,min,max,avg,sum (default: all)")
    span = _route(routes, "range", "every entity's readings in [from, to) (hybrid layout)")
    _range(span)


def _route(routes: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = routes.add_parser(name, help=help_text, description=help_text)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--api-url", help="the API's stage URL (the ApiUrl output, or the local one `serve` prints)")
    where.add_argument("--stack-name", help="the deployed stack: its ApiUrl output is looked up in CloudFormation")
    p.add_argument("--region", help="AWS region (default: from the URL or the environment)")
    p.add_argument("--format", choices=FORMATS, default="table", help="output (default: %(default)s)")
    p.add_argument("--json", action="store_const", dest="format", const="jsonl", help="the same as --format jsonl")
    p.add_argument("--measures", help="comma list of measures to return (default: all)")
    p.add_argument("--consistent", action="store_true", help="strongly consistent reads (twice the read units)")
    p.add_argument("--explain", action="store_true", help="print the query plan and its read-unit estimate instead")
    p.add_argument("--max-attempts", type=positive_int, default=5, help="per request, on 429/503 (default: 5)")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    if name != "range":
        p.add_argument("--entity", required=True, help="entity id")
    p.set_defaults(func=run)
    return p


def _range(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_", required=True, help="start, RFC 3339 or epoch ms (inclusive)")
    p.add_argument("--to", required=True, help="end, RFC 3339 or epoch ms (exclusive)")
    p.add_argument("--order", choices=["asc", "desc"], default="asc", help="time order (default: asc)")
    p.add_argument("--page-size", type=positive_int, help="readings per request (the API's limit, 1..1000)")
    p.add_argument("--max-readings", type=positive_int, help="stop after this many readings")


def run(args: argparse.Namespace) -> int:
    try:
        if args.stack_name:
            client = QueryClient.for_stack(args.stack_name, region=args.region, max_attempts=args.max_attempts)
        else:
            client = QueryClient(args.api_url, region=args.region, max_attempts=args.max_attempts)
        if args.explain:
            return _explain(client, args)
        if args.route == "latest":
            latest = client.latest(
                args.entity, lookback=args.lookback, measures=_list(args.measures), consistent=args.consistent
            )
            _print_readings([latest.reading] if latest.reading else [], args.format, sys.stdout)
            if latest.reading is None:
                print(f"no reading since {latest.searched_from}", file=sys.stderr)
            return 0
        if args.route == "aggregates":
            series = client.aggregates(
                args.entity,
                args.from_,
                args.to,
                args.interval,
                stats=_list(args.stats),
                measures=_list(args.measures),
                consistent=args.consistent,
            )
            _print_rows(series.rows(), ["start", "measure", "readings", *series.stats], args.format, sys.stdout)
            return 0
        stream = _stream(client, args)
        status = None if args.no_progress else StatusLine(sys.stderr)
        if status is not None:
            stream.on_page = lambda _: _progress(status, stream, final=False)
        try:
            _print_readings(itertools.islice(stream, args.max_readings), args.format, sys.stdout)
        finally:
            if status is not None:
                _progress(status, stream, final=True)
        return 0
    except ApiError as exc:
        print(f"tsctl query {args.route}: {exc}", file=sys.stderr)
        return 2 if exc.status == 400 else 1
    except ValueError as exc:
        raise InvalidInput("--api-url", str(exc)) from None


def _stream(client: QueryClient, args: argparse.Namespace) -> ReadingStream:
    options = {
        "limit": args.page_size,
        "order": args.order,
        "measures": _list(args.measures),
        "consistent": args.consistent,
    }
    if args.route == "range":
        return client.range_readings(args.from_, args.to, **options)
    return client.readings(args.entity, args.from_, args.to, **options)


def _explain(client: QueryClient, args: argparse.Namespace) -> int:
    kwargs: dict[str, Any] = {"measures": _list(args.measures)}
    if args.route != "range":
        kwargs["entity_id"] = args.entity
    if args.route in ("readings", "range"):
        kwargs.update(from_=args.from_, to=args.to, limit=args.page_size, order=args.order)
    elif args.route == "aggregates":
        kwargs.update(from_=args.from_, to=args.to, interval=args.interval, stats=_list(args.stats))
    else:
        kwargs.update(lookback=args.lookback)
    plan = client.explain(args.route, **kwargs)
    if args.format == "table":
        rows: list[list[object]] = [
            ["route", plan.route],
            ["layout", plan.layout],
            ["partitions", plan.partition_count],
            ["tables", ", ".join(plan.tables)],
            ["minimum read units", plan.minimum_read_units],
            ["estimated read units", plan.estimated_read_units],
        ]
        print(table(rows, ["", "plan"]))
    else:
        emit_json(plan.raw)
    return 0


def _print_readings(readings: Iterable[Reading], fmt: str, out: IO[str]) -> None:
    if fmt == "jsonl":
        for reading in readings:
            out.write(json.dumps(reading.as_dict(), separators=(",", ":")) + "\n")
        return
    # A table and a CSV header need every column first: measures differ between readings.
    rows = [flat_reading(r) for r in readings]
    columns = ["timestamp", "entity_id", "event_id"]
    extra = sorted({k for row in rows for k in row} - set(columns), key=lambda k: (not k.startswith("m."), k))
    _print_rows(rows, columns + extra, fmt, out)


def _print_rows(rows: list[dict[str, Any]], columns: list[str], fmt: str, out: IO[str]) -> None:
    if fmt == "jsonl":
        for row in rows:
            out.write(json.dumps(row, separators=(",", ":")) + "\n")
    elif fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    elif rows:
        out.write(table([[row.get(c, "") for c in columns] for row in rows], columns) + "\n")
    else:
        out.write("(no readings)\n")


def _progress(status: StatusLine, stream: ReadingStream, *, final: bool) -> None:
    """A progress line once a read takes more than one page."""
    if stream.pages < 2:
        return
    elapsed = time.monotonic() - status.started
    rate = stream.count / elapsed if elapsed > 0 else 0.0
    verb = "read" if final else "reading"
    status.show(f"{verb}: {stream.pages:,} pages, {stream.count:,} readings ({rate:,.0f}/s)", final=final)


def _list(text: str | None) -> list[str] | None:
    return [part.strip() for part in text.split(",") if part.strip()] if text else None
