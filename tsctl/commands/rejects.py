"""``tsctl rejects``: look at the rejects queue, and send fixed readings back to the stream."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from client import resolve_stack_outputs
from keydesign import InvalidInput
from producer.publisher import Publisher, kinesis_client
from producer.redrive import FieldRename, RejectMessage, RejectsQueue, peek, redrive, summarise
from tsctl.arguments import positive_int
from tsctl.aws import aws_client
from tsctl.output import emit_json, table


def register(sub: Any) -> None:
    p = sub.add_parser(
        "rejects",
        help="inspect the rejects queue and redrive readings to the stream",
        description=(
            "The rejects queue holds every reading the ingest function refused, with the field and the reason. "
            "`list` and `show` peek without consuming (messages are received, then made visible again at once); "
            "`redrive` sends chosen readings back to Kinesis and deletes a message only once Kinesis accepted "
            "its reading."
        ),
        epilog=(
            "examples:\n"
            "  tsctl rejects list --stack-name TimeSeriesIngest\n"
            "  tsctl rejects show --queue-url $QUEUE --endpoint-url $AWS --field measures.temp --limit 3\n"
            "  tsctl rejects redrive --stack-name TimeSeriesIngest --field temperature "
            "--rename-field temperature=measures.temp --dry-run"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    _action(actions, "list", "counts by reason and field, oldest and newest (peek: nothing consumed)")
    show = _action(actions, "show", "sample messages with the original payload (peek: nothing consumed)")
    _filters(show)
    show.add_argument("--limit", type=positive_int, default=5, help="messages to show (default: 5)")
    again = _action(actions, "redrive", "send chosen readings back to the stream, then delete their messages")
    _filters(again)
    again.add_argument("--stream", help="stream name or ARN (default: the stack's IngestStreamName output)")
    again.add_argument(
        "--rename-field",
        action="append",
        default=[],
        metavar="OLD=NEW",
        help="move a field before sending (dots reach into objects: measures.tmp=measures.temp); repeatable",
    )
    again.add_argument("--max-attempts", type=positive_int, default=8, help="PutRecords attempts per record")
    again.add_argument(
        "--include-closed",
        action="store_true",
        help="also send readings refused because their period had closed (after widening grace: docs/ingest.md)",
    )
    again.add_argument("--dry-run", action="store_true", help="show what would be sent; send and delete nothing")


def _action(actions: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--queue-url", help="the rejects queue's URL")
    where.add_argument("--stack-name", help="the deployed stack: its RejectsQueueUrl output is used")
    p.add_argument("--endpoint-url", help="AWS endpoint (local mode: the embedded moto server)")
    p.add_argument("--region", help="AWS region (default: from the environment)")
    p.add_argument(
        "--visibility-timeout",
        type=positive_int,
        default=60 if name != "redrive" else 300,
        help="seconds a received message stays hidden if this command dies before releasing it",
    )
    verb = "take" if name == "redrive" else "look at"
    p.add_argument("--max-messages", type=positive_int, default=1000, help=f"messages to {verb} (default: 1000)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)
    return p


def _filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--field", action="append", default=[], help="only rejects of this field (repeatable)")
    p.add_argument("--reason-contains", help="only rejects whose reason contains this text")
    p.add_argument("--reject-id", action="append", default=[], help="only this reject (repeatable)")


def run(args: argparse.Namespace) -> int:
    outputs = resolve_stack_outputs(args.stack_name, region=args.region) if args.stack_name else {}
    queue_url = args.queue_url or outputs.get("RejectsQueueUrl")
    if not queue_url:
        raise InvalidInput("--stack-name", f"stack {args.stack_name} has no RejectsQueueUrl output")
    queue = RejectsQueue(aws_client("sqs", args.endpoint_url, args.region), queue_url)
    if args.action == "list":
        return _list(queue, args)
    if args.action == "show":
        return _show(queue, args)
    return _redrive(queue, args, outputs)


def _list(queue: RejectsQueue, args: argparse.Namespace) -> int:
    total = queue.approximate_count()
    summary: dict[str, Any] = {"queue_url": queue.queue_url, "approximate_total": total}
    summary.update(summarise(peek(queue, args.max_messages, visibility_timeout_s=args.visibility_timeout)))
    if args.json:
        emit_json(summary)
        return 0
    print(
        f"{summary['messages']:,} messages looked at (about {total:,} in the queue), "
        f"{summary['redrivable']:,} redrivable"
    )
    if summary["messages"]:
        print(f"oldest {summary['oldest']}, newest {summary['newest']}\n")
        print(table([[f, n] for f, n in summary["by_field"].items()], ["field", "count"]) + "\n")
        print(
            table(
                [[r["field"], r["count"], r["reason"][:100]] for r in summary["by_reason"]],
                ["field", "count", "reason"],
            )
        )
    return 0


def _show(queue: RejectsQueue, args: argparse.Namespace) -> int:
    messages = peek(queue, args.max_messages, visibility_timeout_s=args.visibility_timeout)
    chosen = [m for m in messages if _selected(m, args)][: args.limit]
    if args.json:
        emit_json([m.as_dict() for m in chosen])
        return 0
    if not chosen:
        print("(no matching rejects)")
    for message in chosen:
        print(f"reject {message.reject_id}  at {message.rejected_at}")
        print(f"  field:   {message.field}")
        print(f"  reason:  {message.reason}")
        print(f"  payload: {message.payload_text()}")
        why = message.why_not_redrivable()
        if message.payload_truncated:
            print("  (payload truncated: this is the start of it only)")
        print(f"  redrive: {'possible' if why is None else 'no, ' + why}\n")
    return 0


def _redrive(queue: RejectsQueue, args: argparse.Namespace, outputs: dict[str, str]) -> int:
    try:
        renames = [FieldRename.parse(text) for text in args.rename_field]
    except ValueError as exc:
        raise InvalidInput("--rename-field", str(exc)) from None
    publisher = None
    if not args.dry_run:
        stream = args.stream or outputs.get("IngestStreamName")
        if not stream:
            raise InvalidInput("--stream", "is required with --queue-url (or give --stack-name)")
        publisher = Publisher(
            kinesis_client(endpoint_url=args.endpoint_url, region=args.region), stream, max_attempts=args.max_attempts
        )
    report = redrive(
        queue,
        publisher,
        select=lambda m: _selected(m, args),
        renames=renames,
        limit=args.max_messages,
        dry_run=args.dry_run,
        visibility_timeout_s=args.visibility_timeout,
        include_closed=args.include_closed,
    )
    if args.json:
        emit_json({**report.as_dict(), "readings": report.readings if args.dry_run else None})
    else:
        verb = "would send" if args.dry_run else "sent and deleted"
        print(
            f"{verb}: {len(report.sent):,}; kept in the queue: {len(report.kept):,}; "
            f"not chosen: {report.not_selected:,}"
        )
        for message, why in report.kept:
            print(f"kept {message.reject_id}: {why}", file=sys.stderr)
        if args.dry_run:
            for reading in report.readings[:20]:
                print(f"  {reading}")
    sent_all = not any("Kinesis did not accept" in why or "did not delete" in why for _, why in report.kept)
    return 0 if sent_all else 1


def _selected(message: RejectMessage, args: argparse.Namespace) -> bool:
    if args.field and message.field not in args.field:
        return False
    if args.reason_contains and args.reason_contains not in message.reason:
        return False
    return not (args.reject_id and message.reject_id not in args.reject_id)
