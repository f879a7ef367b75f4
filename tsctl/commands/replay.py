"""``tsctl replay``: put the stream batches the mappings gave up on through their function again."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from client import resolve_stack_outputs
from keydesign import InvalidInput, format_ts
from producer.redrive import MessageQueue
from replay.failures import FailedBatch, Source
from replay.invoker import INVOKE_CONFIG, LambdaInvoker
from replay.runner import FailureQueue, Outcome, peek, replay
from replay.sources import DynamoStreamRanges, KinesisRanges, RangeReader
from tsctl.arguments import queue_reader_options
from tsctl.aws import aws_client
from tsctl.output import emit_json, table

#: Each queue: the stack outputs naming it and the function its batches go to.
QUEUES = {
    "ingest": ("IngestFailureQueueUrl", "IngestFunctionName"),
    "hotkeys": ("HotKeysFailureQueueUrl", "HotKeysFunctionName"),
}


def register(sub: Any) -> None:
    p = sub.add_parser(
        "replay",
        help="replay the stream batches the ingest and hot-key mappings gave up on",
        description=(
            "A failure queue's message names a batch (stream, shard, sequence range), not its records. `list` shows "
            "each with until when its stream still holds it (peek: nothing consumed); `run` reads each range back "
            "whole and invokes the function with the records, one event a batch as its mapping cut it (original "
            "sequence numbers: a replay never beats a correction published later), and deletes a message only once "
            "its range was read to its end and every record is stored or rejected. A message that fails is reported "
            "and kept, and the next goes on; the exit code is 1 if any was kept. What the stream no longer holds is "
            "named, with the time it aged out."
        ),
        epilog=(
            "examples:\n"
            "  tsctl replay list --stack-name TimeSeriesIngest\n"
            "  tsctl replay run --stack-name TimeSeriesIngest --queue ingest --dry-run\n"
            "  tsctl replay run --ingest-queue-url $Q --endpoint-url $AWS --lambda-endpoint-url $LAMBDA  # local"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    _action(actions, "list", "each failed batch, and until when its stream holds it (peek: nothing consumed)")
    run_ = _action(actions, "run", "read each failed batch back and put it through its function; delete when done")
    run_.add_argument("--ingest-function", help="function for the ingest queue's batches (default: the message's)")
    run_.add_argument("--hotkeys-function", help="function for the hot-key queue's batches (default: the message's)")
    run_.add_argument("--dry-run", action="store_true", help="read the ranges and report; invoke and delete nothing")
    run_.add_argument(
        "--lambda-endpoint-url",
        help="Lambda's endpoint, if not --endpoint-url's (local mode: the Lambda API tsctl serve prints)",
    )
    run_.add_argument(
        "--drop-lost",
        action="store_true",
        help="also delete a message part or all of whose range aged out of the stream (once you have read what)",
    )


def _action(actions: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--stack-name", help="the deployed stack: its failure queue and function outputs are used")
    p.add_argument("--ingest-queue-url", help="the ingest mapping's failure queue")
    p.add_argument("--hotkeys-queue-url", help="the hot-key mappings' failure queue")
    p.add_argument("--queue", choices=("ingest", "hotkeys", "both"), default="both", help="which queue (default: both)")
    # `run` holds each message again, with those still waiting, before working it (replay.runner).
    visibility_s = 60 if name == "list" else 300
    queue_reader_options(p, visibility_timeout_s=visibility_s, max_messages=100, what="messages per queue")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    outputs = resolve_stack_outputs(args.stack_name, region=args.region) if args.stack_name else {}
    given = {"ingest": args.ingest_queue_url, "hotkeys": args.hotkeys_queue_url}
    wanted = ("ingest", "hotkeys") if args.queue == "both" else (args.queue,)
    urls = {name: given[name] or outputs.get(QUEUES[name][0]) for name in wanted}
    if not any(urls.values()):
        raise InvalidInput("--stack-name", "name a stack, or give --ingest-queue-url / --hotkeys-queue-url")
    sqs = aws_client("sqs", args.endpoint_url, args.region)
    queues = {name: MessageQueue(sqs, url, FailedBatch.parse) for name, url in urls.items() if url}
    readers: dict[Source, RangeReader] = {
        "kinesis": KinesisRanges(aws_client("kinesis", args.endpoint_url, args.region)),
        "dynamodb": DynamoStreamRanges(aws_client("dynamodbstreams", args.endpoint_url, args.region)),
    }
    if args.action == "list":
        return _list(queues, readers, args)
    return _replay(queues, readers, outputs, args)


def _list(queues: dict[str, FailureQueue], readers: dict[Source, RangeReader], args: argparse.Namespace) -> int:
    now = int(time.time() * 1000)
    found = {
        name: peek(queue, readers, args.max_messages, visibility_timeout_s=args.visibility_timeout)
        for name, queue in queues.items()
    }
    if args.json:
        emit_json({name: [s.as_dict(now) for s in statuses] for name, statuses in found.items()})
        return 0
    for name, statuses in found.items():
        print(f"{name}: {len(statuses):,} failed batch(es) looked at")
        rows: list[list[object]] = []
        for status in statuses:
            batch = status.batch
            if batch.unreadable is not None:
                rows.append([batch.message_id, "-", "-", f"unreadable: {batch.unreadable}"])
                continue
            until = status.kept_until_ms
            held = "unknown" if until is None else format_ts(until)
            state = f"AGED OUT at {held}" if status.aged_out(now) else f"held until {held}"
            rows.append([batch.range, batch.batch_size, f"{batch.failed_at} {batch.condition}", state])
        if rows:
            print(table(rows, ["range", "records", "failed", "stream"]) + "\n")
    return 0


def _replay(
    queues: dict[str, FailureQueue],
    readers: dict[Source, RangeReader],
    outputs: dict[str, str],
    args: argparse.Namespace,
) -> int:
    overrides = {"ingest": args.ingest_function, "hotkeys": args.hotkeys_function}
    lambda_endpoint = args.lambda_endpoint_url or args.endpoint_url
    invoker = None if args.dry_run else LambdaInvoker(aws_client("lambda", lambda_endpoint, args.region, INVOKE_CONFIG))
    results: dict[str, list[Outcome]] = {}
    for name, queue in queues.items():

        def function_for(batch: FailedBatch, name: str = name) -> str:
            chosen = overrides[name] or batch.function_arn or outputs.get(QUEUES[name][1])
            if not chosen:
                raise InvalidInput(f"--{name}-function", "the message names no function; give one")
            return chosen

        results[name] = replay(
            queue,
            readers,
            invoker,
            function_for=function_for,
            limit=args.max_messages,
            dry_run=args.dry_run,
            drop_lost=args.drop_lost,
            visibility_timeout_s=args.visibility_timeout,
        )
    if args.json:
        emit_json({name: [o.as_dict() for o in outcomes] for name, outcomes in results.items()})
    else:
        for name, outcomes in results.items():
            for o in outcomes:
                if args.dry_run:
                    missing = "".join(f"; {m}" for m in (o.lost.describe() if o.lost else None, o.unread) if m)
                    print(f"{name} {o.batch.range}: {o.records:,} record(s) still in the stream{missing}")
                elif o.deleted:
                    print(f"{name} {o.batch.range}: {o.records:,} record(s) put through; message deleted")
                else:
                    print(f"{name} {o.batch.range}: kept: {o.kept_because}", file=sys.stderr)
            if not args.dry_run:
                kept = sum(not o.deleted for o in outcomes)
                summary = f"{len(outcomes) - kept:,} message(s) put through and deleted, {kept:,} kept"
                print(f"{name}: {summary}", file=sys.stderr)
    done = all(o.deleted for outcomes in results.values() for o in outcomes)
    return 0 if args.dry_run or done else 1
