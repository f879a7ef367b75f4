"""Argument types shared by the commands: a bad value exits 2 with one line naming the option."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from keydesign import KeyDesignError
from keydesign.timefmt import parse_instant

if TYPE_CHECKING:
    from local_runtime.faults import LocalFaults

N = TypeVar("N", int, float)
T = TypeVar("T")


def checked(parse: Callable[[str], N], accept: Callable[[N], bool], kind: str, refusal: str) -> Callable[[str], N]:
    """An argument type: text ``parse`` fails on is not ``kind``; a value ``accept`` refuses gets
    ``refusal`` (formatted with the value)."""

    def convert(text: str) -> N:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(refusal.format(value))
        return value

    return convert


def parsed_by(parse: Callable[[str], T]) -> Callable[[str], T]:
    """An argument type from a parser that raises ValueError: why it refuses a value (a key-design
    error's reason) is the one line."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except KeyDesignError as exc:
            raise argparse.ArgumentTypeError(exc.reason) from None
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def instant(option: str) -> Callable[[str], int]:
    """An argument type: RFC 3339 or epoch milliseconds, as epoch milliseconds."""
    return parsed_by(lambda text: parse_instant(text, option))


positive_int = checked(int, lambda v: v >= 1, "a whole number", "{} must be at least 1")
non_negative = checked(float, lambda v: 0 <= v < math.inf, "a number", "{} must be a finite number of 0 or more")
positive = checked(float, lambda v: 0 < v < math.inf, "a number", "{} must be above 0")


def faults_option(p: argparse.ArgumentParser) -> None:
    """``--faults`` of the local runtime (serve, demo), parsed into its ``LocalFaults``."""
    p.add_argument(
        "--faults",
        type=parsed_by(_local_faults),
        default="",
        help="inject faults: throttle=N,rate=P (throttled BatchWriteItem), partial=N,partial_rate=P,fraction=F "
        "(UnprocessedItems), latency=MS, invoke_errors=P (failed invocations), seed=N",
    )


def _local_faults(text: str) -> LocalFaults:
    # Imported here: moto and boto3 take a while to import, which every other command would pay.
    from local_runtime.faults import LocalFaults  # noqa: PLC0415

    return LocalFaults.parse(text)


def queue_reader_options(
    p: argparse.ArgumentParser, *, visibility_timeout_s: int, max_messages: int, what: str
) -> None:
    """The options of an action that receives from SQS by hand (rejects, replay): the endpoint and region,
    how long a received message stays hidden, how many messages it takes (``what`` names them), JSON output."""
    p.add_argument("--endpoint-url", help="AWS endpoint (local mode: the embedded moto server)")
    p.add_argument("--region", help="AWS region (default: from the environment)")
    p.add_argument(
        "--visibility-timeout",
        type=positive_int,
        default=visibility_timeout_s,
        help="seconds a received message stays hidden if this command dies before releasing it",
    )
    p.add_argument("--max-messages", type=positive_int, default=max_messages, help=f"{what} (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
