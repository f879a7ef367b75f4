"""Progress lines: rewritten in place on a terminal, spaced out in a log."""

from __future__ import annotations

import io

from tsctl.output import StatusLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_every_interval_and_always_the_last_one() -> None:
    # Given a status line on a file (not a terminal) shown every minute
    log = io.StringIO()
    status = StatusLine(log, every_s=60)
    # When three updates come at once and then the final one
    for n in range(3):
        status.show(f"sent {n}", final=False)
    status.show("sent 3", final=True)
    # Then the first one and the final one are written, each on its own line
    assert log.getvalue() == "sent 0\nsent 3\n"


def test_a_terminal_line_is_rewritten_in_place_and_ended_once() -> None:
    terminal = Terminal()
    status = StatusLine(terminal)
    status.show("reading: 2 pages", final=False)
    status.show("read: 3 pages", final=True)
    assert terminal.getvalue() == "\rreading: 2 pages\rread: 3 pages\n"
