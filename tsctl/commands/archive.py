"""``tsctl archive``: the readings of a table export (a dropped table's archive) as JSON Lines."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from archives import (
    DEFAULT_MAX_READINGS,
    ArchiveError,
    LocalStore,
    ReadStats,
    S3Store,
    Selection,
    Store,
    read_readings,
)
from keydesign import Reading, validate_entity_id
from tsctl.arguments import instant, parsed_by, positive_int
from tsctl.aws import aws_client


def register(sub: Any) -> None:
    p = sub.add_parser(
        "archive",
        help="read the readings of a table export (S3 or a directory) as JSON Lines",
        description=(
            "Read a DynamoDB export of a readings table (what the rotator writes before it drops a table) "
            "and print its readings as JSON Lines, one object per reading as a producer sends it "
            "(entity_id, timestamp, event_id, measures, dimensions). Blocks are decoded; a reading stored "
            "in several blocks is printed once, the copy of the highest version. Memory holds at most "
            "--max-readings-in-memory decoded readings: a larger export is sorted out through spill files "
            "in --work-dir. A block that does not decode (corrupt) is named on stderr with its file, line and key "
            "and left out; the rest is read, and the command exits 1. Formats: docs/archives.md."
        ),
        epilog=(
            "examples:\n"
            "  tsctl archive s3://my-exports/dynamodb-exports/timeseries-readings-2026-11-22-06/ -o readings.jsonl\n"
            "  tsctl archive ./export-dir --entity sensor-alpha-001 --from 2026-11-22T06:10:00Z "
            "--to 2026-11-22T06:20:00Z\n"
            "  tsctl archive s3://timeseries-demo-exports/dynamodb-exports/ --endpoint-url http://127.0.0.1:5000 "
            "--without-manifest"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", help="s3://bucket/prefix/ or a directory holding the export's AWSDynamoDB/ folder")
    p.add_argument("-o", "--output", type=Path, help="JSON Lines file to write (default: stdout)")
    entity = parsed_by(lambda text: validate_entity_id(text, "--entity"))
    p.add_argument("--entity", action="append", type=entity, default=[], help="only this entity (repeatable)")
    p.add_argument("--from", dest="from_ms", type=instant("--from"), help="start, RFC 3339 or epoch ms (inclusive)")
    p.add_argument("--to", dest="to_ms", type=instant("--to"), help="end, RFC 3339 or epoch ms (exclusive)")
    p.add_argument(
        "--without-manifest",
        action="store_true",
        help="read an export folder that has no manifest (moto's, in local mode): no item count is checked",
    )
    p.add_argument(
        "--max-readings-in-memory",
        type=positive_int,
        default=DEFAULT_MAX_READINGS,
        help="decoded readings held at once (default: %(default)s; one entity's 10 s may exceed it)",
    )
    p.add_argument("--work-dir", type=Path, help="where spill files go (default: the system's temporary directory)")
    p.add_argument("--endpoint-url", help="S3 endpoint (local mode: the embedded moto server)")
    p.add_argument("--region", help="AWS region (default: from the environment)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.from_ms is not None and args.to_ms is not None and args.from_ms >= args.to_ms:
        print("tsctl archive: --from must precede --to", file=sys.stderr)
        return 2
    selection = Selection(frozenset(args.entity) or None, args.from_ms, args.to_ms)
    stats = ReadStats()
    try:
        if args.source.startswith("s3://"):
            store: Store = S3Store.parse(aws_client("s3", args.endpoint_url, args.region), args.source)
        else:
            store = LocalStore(Path(args.source))
        readings = read_readings(
            store,
            selection,
            max_readings=args.max_readings_in_memory,
            without_manifest=args.without_manifest,
            work_dir=args.work_dir,
            stats=stats,
            on_corrupt_block=lambda exc: print(f"tsctl archive: skipped {exc}", file=sys.stderr),
        )
        _write(readings, args.output)
    except ArchiveError as exc:
        print(f"tsctl archive: {exc}", file=sys.stderr)
        return 1
    for folder in stats.incomplete:
        print(f"tsctl archive: skipped {folder}: no manifest (a failed or unfinished export)", file=sys.stderr)
    corrupt = f"; {stats.corrupt_blocks:,} corrupt blocks skipped (named above)" if stats.corrupt_blocks else ""
    print(
        f"{stats.readings:,} readings from {stats.blocks:,} blocks in {stats.data_files:,} data files of "
        f"{stats.exports:,} export(s); {stats.duplicates:,} older copies dropped{corrupt}",
        file=sys.stderr,
    )
    return 1 if stats.corrupt_blocks else 0


def _write(readings: Iterable[Reading], output: Path | None) -> None:
    """Every reading, one JSON object a line. A file appears whole or not at all: it is written
    under a temporary name and renamed once the last reading is in."""
    lines = (json.dumps(r.to_json(), separators=(",", ":"), ensure_ascii=False) + "\n" for r in readings)
    if output is None:
        sys.stdout.writelines(lines)
        return
    partial = output.with_name(f".{output.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as out:
            out.writelines(lines)
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
