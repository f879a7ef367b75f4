"""Where the functions' standard output goes while the system runs: a log file, like CloudWatch Logs.

In Lambda, a handler's stdout (Powertools' JSON log lines and its EMF metric
blobs, one per invocation) goes to CloudWatch Logs. In process it would go to
the terminal, in between the output of ``tsctl serve`` or the demo. So while
the system runs, ``sys.stdout`` is routed to a sink (a file, or nowhere), and
the command's own output is written to :attr:`FunctionLogRouter.console`, the
stdout it had before. Logging handlers already bound to that stdout (Powertools
binds its handler when the logger is created) are re-pointed too.
"""

from __future__ import annotations

import io
import logging
import sys
import threading
from typing import TextIO


class _RoutedStream(io.TextIOBase):
    """Writes to the sink while routing; afterwards passes through to whatever ``sys.stdout`` is
    (a logging handler created meanwhile keeps this object for the life of the process)."""

    def __init__(self, sink: TextIO | None) -> None:
        self._sink = sink
        self._routing = True
        self._lock = threading.Lock()

    def stop_routing(self) -> None:
        with self._lock:
            if self._sink is not None:
                self._sink.flush()
            self._routing = False

    def _target(self) -> TextIO | None:
        if self._routing:
            return self._sink
        current = sys.stdout
        return current if current is not self else sys.__stdout__

    def write(self, text: str) -> int:
        with self._lock:
            target = self._target()
            if target is not None:
                target.write(text)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            target = self._target()
            if target is not None:
                target.flush()

    def writable(self) -> bool:
        return True


class FunctionLogRouter:
    """``install()`` routes ``sys.stdout`` to ``sink``; ``uninstall()`` puts everything back (each once)."""

    def __init__(self, sink: TextIO | None) -> None:
        self._stream = _RoutedStream(sink)
        self.console: TextIO = sys.stdout
        self._repointed: list[logging.StreamHandler[TextIO]] = []

    def install(self) -> None:
        self.console = sys.stdout
        routed: TextIO = self._stream  # type: ignore[assignment]
        for handler in _stream_handlers():
            if handler.stream is self.console:
                handler.setStream(routed)
                self._repointed.append(handler)
        sys.stdout = routed

    def uninstall(self) -> None:
        routed: object = self._stream
        if sys.stdout is routed:
            sys.stdout = self.console
        for handler in self._repointed:
            if handler.stream is routed:
                handler.setStream(self.console)
        self._repointed.clear()
        self._stream.stop_routing()


def _stream_handlers() -> list[logging.StreamHandler[TextIO]]:
    loggers = [
        logging.getLogger(),
        *(logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)),
    ]
    return [h for logger in loggers for h in logger.handlers if isinstance(h, logging.StreamHandler)]
