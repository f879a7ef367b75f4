"""Entry point: ``python -m tsctl <command> [--json] ...``.

Each command lives in ``tsctl/commands/<name>.py`` and exposes
``register(subparsers) -> None``; the parser it adds sets ``func`` to a
callable ``(args) -> int`` (the exit code). Bad input exits 2 with one line
naming the field, and an AWS error (no such stack or queue, no credentials...)
exits 1 with one line, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from botocore.exceptions import BotoCoreError, ClientError

from keydesign import KeyDesignError

COMMANDS = ("plan", "keys", "preview", "demo", "publish", "serve", "simulate", "query", "rejects", "replay", "archive")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tsctl",
        description="Plan, preview and run the write-sharded DynamoDB time-series store.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tsctl.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # The subcommand of `query`, `rejects` and `replay` (a route or an action) names where it failed.
    where = " ".join(filter(None, ["tsctl", args.command, getattr(args, "route", None), getattr(args, "action", None)]))
    try:
        return int(args.func(args))
    except KeyDesignError as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return 2
    except (BotoCoreError, ClientError) as exc:
        print(f"{where}: {exc}", file=sys.stderr)
        return 1
