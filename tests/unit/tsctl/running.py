"""tsctl run in-process, as the tests of its commands run it: the whole CLI, or ``archive`` alone
through its own parser."""

from __future__ import annotations

import argparse

import pytest

from tsctl.cli import main
from tsctl.commands import archive


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``tsctl <argv>``: its exit code, what it printed and what it wrote to stderr."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_archive(argv: list[str]) -> int:
    """``tsctl archive <argv>``'s exit code."""
    parser = argparse.ArgumentParser()
    archive.register(parser.add_subparsers())
    args = parser.parse_args(["archive", *argv])
    return int(args.func(args))
