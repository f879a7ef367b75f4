"""``tsctl serve``: the whole system on this machine, left running until Ctrl-C.

Ingest on the Kinesis stream, the query API on a loopback port, the hot-key
detector on the tables' streams, and (with a table period) the rotator on its
schedule; the endpoints and commands that work against them are printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shlex
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from infra.config import Context, load_cdk_json_context
from keydesign import format_ts
from keydesign.periods import format_duration
from tsctl.arguments import checked, faults_option
from tsctl.output import table

if TYPE_CHECKING:
    from local_runtime import Endpoints, LocalFaults

REPO_ROOT = Path(__file__).resolve().parents[2]
_port = checked(
    int, lambda v: 0 <= v <= 65_535, "a port number", "{} is not a port number (0-65535; 0 picks a free one)"
)
_speed = checked(float, lambda v: 0 < v <= 1_000_000, "a number", "{:g} must lie in (0, 1,000,000]")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run the whole system locally (embedded moto, in-process handlers) until Ctrl-C",
        description=(
            "Start the embedded local runtime: moto's server on a loopback port with the stream, tables, "
            "queues, topic and secret of the stack's configuration, and the functions running in this "
            "process, triggered as Lambda triggers them (the query API served on its own loopback port). "
            "Prints the endpoints and example commands, then runs until Ctrl-C. No AWS account is used: every "
            "endpoint is on 127.0.0.1, and local requests need no SigV4 signature."
        ),
        epilog=(
            "examples:\n"
            "  tsctl serve\n"
            '  tsctl serve --faults "throttle=2,rate=0.05,partial=3,fraction=0.5,invoke_errors=0.1"\n'
            "  tsctl serve --context table_period=day --context bucket=15m\n"
            "  tsctl serve --context table_period=hour --rotator-speed 720   # an hour of rotation every 5 s"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    faults_option(p)
    p.add_argument(
        "--context",
        type=_key_value,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a cdk.json value",
    )
    p.add_argument("--region", default="eu-west-1", help="region of the local resources (default: %(default)s)")
    p.add_argument("--moto-port", type=_port, default=0, help="port of the AWS endpoint (default: a free one)")
    p.add_argument("--api-port", type=_port, default=0, help="port of the REST API (default: a free one)")
    p.add_argument(
        "--function-log",
        type=Path,
        default=Path("out/local/functions.log"),
        help="where the handlers' logs and metrics go (default: %(default)s)",
    )
    p.add_argument(
        "--rotator-speed",
        type=_speed,
        default=1.0,
        metavar="FACTOR",
        help="with a table_period: run the rotator's clock this many times faster (default: the real clock)",
    )
    p.add_argument("--stop-after", type=float, default=None, metavar="SECONDS", help="stop by itself (for scripts)")
    p.add_argument("--json", action="store_true", help="print the endpoints as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    # Imported here: moto and boto3 take half a second to import, which every other command would pay.
    from local_runtime import LocalOptions, LocalSystem  # noqa: PLC0415

    config = Context.parse({**load_cdk_json_context(REPO_ROOT / "cdk.json"), **dict(args.context)})
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    options = LocalOptions(
        region=args.region,
        moto_port=args.moto_port,
        api_port=args.api_port,
        faults=args.faults,
        function_log=args.function_log,
        rotator_clock_speed=args.rotator_speed,
        rollups=True,
        compaction=True,
    )
    stop = threading.Event()
    # Ctrl-C and SIGTERM set the event rather than raise inside the wait (a
    # KeyboardInterrupt landing in Event.wait can leave its lock broken); the
    # default handlers are back for the shutdown, so a second Ctrl-C still quits.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with LocalSystem(config, options) as system:
            endpoints = system.endpoints
            if args.json:
                json.dump(dataclasses.asdict(endpoints), system.console, indent=2)
                system.console.write("\n")
            else:
                render(
                    endpoints,
                    system.console,
                    faults=args.faults,
                    function_log=args.function_log,
                    rotator=_rotator_note(config, args.rotator_speed),
                    rollups=_rollups_note(config, options.rollup_every_s),
                    phases=_phases(system.rotations),
                )
            system.console.flush()
            stop.wait(args.stop_after)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            print("stopping...", file=sys.stderr)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def render(
    endpoints: Endpoints,
    out: TextIO,
    *,
    faults: LocalFaults,
    function_log: Path,
    rotator: str,
    rollups: str,
    phases: Mapping[str, str],
) -> None:
    """The endpoints, one line each; each readings table with its phase in the rotator's first run."""
    e = endpoints
    url = e.endpoint_url
    env = f"AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local AWS_DEFAULT_REGION={e.region}"
    rows = [
        ("AWS endpoint (moto)", f"{url}   (any credentials; region {e.region})"),
        ("Kinesis stream", e.stream_name),
        (
            "readings table(s)",
            ", ".join(f"{t} ({phases[t]})" if t in phases else t for t in e.readings_tables),
        ),
        ("control table", e.control_table),
        ("rejects queue", e.rejects_queue_url),
        ("ingest on-failure queue", e.ingest_failures_queue_url),
        ("hot-key on-failure queue", e.hotkeys_failures_queue_url or "-"),
        ("hot-key topic", e.alarm_topic_arn),
        ("Lambda API", f"{e.lambda_endpoint_url}   (Invoke, for tsctl replay)" if e.lambda_endpoint_url else "-"),
        ("REST API", f"{e.api_url}   (no SigV4 locally: plain HTTP)" if e.api_url else "not served"),
        ("functions", ", ".join(e.functions)),
        ("rotator", rotator),
        ("rollups", rollups),
        ("faults", faults.describe()),
        ("function logs", str(function_log)),
    ]
    out.write("Local system running; Ctrl-C stops it.\n\n")
    out.writelines(f"  {line}\n" for line in table(rows).splitlines())
    scanned = shlex.quote(e.readings_tables[0]) if e.readings_tables else "<table>"
    examples = [
        f"{env} python -m tsctl publish --endpoint-url {url} --stream {shlex.quote(e.stream_name)} "
        "--entities 1000 --rate 500 --hot sensor-alpha-001=200 --duration 30s",
        f"{env} aws --endpoint-url {url} dynamodb scan --table-name {scanned} --select COUNT",
        f"{env} python -m tsctl rejects list --endpoint-url {url} --queue-url {e.rejects_queue_url}",
    ]
    if e.lambda_endpoint_url:
        examples.append(
            f"{env} python -m tsctl replay run --endpoint-url {url} --lambda-endpoint-url {e.lambda_endpoint_url} "
            f"--ingest-queue-url {e.ingest_failures_queue_url}"
            + (f" --hotkeys-queue-url {e.hotkeys_failures_queue_url}" if e.hotkeys_failures_queue_url else "")
        )
    out.write("\nTry:\n")
    out.writelines(f"  {example}\n" for example in examples)
    if e.api_url:
        out.write("\nThen read it back (after publishing; local mode needs no SigV4 signing):\n")
        out.writelines(f"  {example}\n" for example in curl_examples(e.api_url, int(time.time() * 1000)))
        out.write(f"  python -m tsctl query latest --api-url {shlex.quote(e.api_url)} --entity sensor-alpha-001\n")


def curl_examples(api_url: str, now_ms: int) -> list[str]:
    """curl commands for every route, an hour either side of now (UTC times: no '+' to escape)."""
    since, until = format_ts(now_ms - 3_600_000), format_ts(now_ms + 3_600_000)
    minute = now_ms - now_ms % 60_000
    return [
        f"API={shlex.quote(api_url)}",
        f'curl "$API/entities/sensor-alpha-001/readings?from={since}&to={until}&limit=5"',
        'curl "$API/entities/sensor-alpha-001/latest"',
        f'curl "$API/entities/sensor-alpha-001/aggregates?from={since}&to={until}&interval=1m&stats=count,avg,max"',
        f'curl "$API/readings?from={since}&to={until}&limit=5"',
        f'curl "$API/entities/sensor-alpha-001/readings?from={since}&to={until}&explain=true"',
        # Rollups tile whole minutes only (and answer up to their watermark, `reached`).
        f'curl "$API/aggregates?from={format_ts(minute - 3_600_000)}'
        f'&to={format_ts(minute + 3_600_000)}&interval=1m&stats=count,avg"',
    ]


def _rollups_note(config: Context, every_s: float) -> str:
    if not config.rollups:
        return "off (rollups: null)"
    settle = config.ingest_timeout_s + 5
    return (
        f"{config.rollups}, every {every_s:g} s of the real clock: a minute is applied "
        f"{settle} s after it ends, from the first marks on; readings up to max_age "
        f"({format_duration(config.max_age_ms)}) late are applied too"
    )


def _rotator_note(config: Context, speed: float) -> str:
    if config.table_period is None:
        return "not run (no table_period: one readings table)"
    every = config.rotation_interval_minutes()
    clock = "the real clock" if speed == 1 else f"a clock {speed:g}x faster than real time"
    return (
        f"every {every} min of {clock} ({config.table_period} tables, {config.prebuild_periods} built "
        f"ahead, kept {format_duration(config.retention_ms)}); ran at start, as the stack's schedule "
        f"rate({every} minutes) would"
    )


def _phases(rotations: list[dict[str, Any]]) -> dict[str, str]:
    """Each table's phase as the rotator's latest run saw it."""
    if not rotations:
        return {}
    summary = rotations[-1].get("summary") or {}
    return {str(k): str(v) for k, v in dict(summary.get("phases", {})).items()}


def _key_value(pair: str) -> tuple[str, str]:
    key, sep, value = pair.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{pair!r} is not KEY=VALUE")
    return key.strip(), value.strip()
