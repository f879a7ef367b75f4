"""moto's server, embedded: a child process on a free loopback port, stopped on exit.

The server runs in its own Python process (``python -m local_runtime.moto_server``),
not as a thread of the caller's: moto's per-item work (copying, serialising
every item a Query returns) then runs on another core, beside the handlers
instead of taking turns with them for one interpreter lock, and a tracer in the
caller (coverage, a profiler) does not slow it down. Measured: see
docs/local.md. While it runs, DynamoDB tables order and project items through
:mod:`local_runtime.moto_speedups` (same results, far faster).

The child prints its port on its first line of output, then serves until its
standard input closes: when :meth:`EmbeddedMoto.stop` closes it, or when the
parent dies for any reason, so a server never outlives the process that
started it; each start is a fresh process with nothing left from an earlier one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import subprocess
import sys
import threading
from pathlib import Path

from local_runtime.environment import LOOPBACK, assert_loopback

#: How long the child may take to import moto and bind (a loaded machine takes seconds).
START_TIMEOUT_S = 60.0
_log = logging.getLogger(__name__)
_ROOT = Path(__file__).resolve().parents[1]


class EmbeddedMoto:
    """``with EmbeddedMoto() as moto: moto.endpoint_url`` -> ``http://127.0.0.1:<port>``."""

    def __init__(self, port: int = 0) -> None:
        self._requested_port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._endpoint_url: str | None = None

    @property
    def endpoint_url(self) -> str:
        if self._endpoint_url is None:
            raise RuntimeError("the moto server is not running")
        return self._endpoint_url

    def start(self) -> str:
        if self._process is not None:
            return self.endpoint_url
        if self._requested_port:
            _refuse_taken_port(self._requested_port)
        # The repository and the Lambda code root, as the venv's .pth gives them (and pytest's pythonpath).
        roots = (str(_ROOT), str(_ROOT / "functions"), os.environ.get("PYTHONPATH", ""))
        path = os.pathsep.join(p for p in roots if p)
        process = subprocess.Popen(  # noqa: S603 - our own module, with this interpreter
            [sys.executable, "-m", "local_runtime.moto_server", str(self._requested_port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": path},
        )
        self._process = process
        try:
            port = _first_line(process, START_TIMEOUT_S)
        except BaseException:
            self._end(process)
            self._process = None
            raise
        self._endpoint_url = assert_loopback(f"http://{LOOPBACK}:{port}")
        _log.info("moto server on %s (process %d)", self._endpoint_url, process.pid)
        return self._endpoint_url

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        self._endpoint_url = None
        self._end(process)

    @staticmethod
    def _end(process: subprocess.Popen[bytes]) -> None:
        if process.stdin is not None:
            with contextlib.suppress(OSError):  # already gone
                process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> EmbeddedMoto:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _first_line(process: subprocess.Popen[bytes], timeout_s: float) -> int:
    """The port the child prints once it serves; an error naming what went wrong otherwise."""
    lines: queue.Queue[bytes] = queue.Queue()
    stdout = process.stdout
    assert stdout is not None  # noqa: S101 - Popen was given stdout=PIPE
    threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
    try:
        line = lines.get(timeout=timeout_s)
    except queue.Empty:
        raise TimeoutError(f"the moto server did not start within {timeout_s:.0f} s") from None
    text = line.decode(errors="replace").strip()
    if not text.isdigit():
        code = process.poll()
        raise RuntimeError(f"the moto server did not start (exit code {code}); its output began {text[:200]!r}")
    return int(text)


def _refuse_taken_port(port: int) -> None:
    # Fail here with a clear message rather than in the child's bind.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError as exc:
            raise OSError(f"port {port} on {LOOPBACK} is not free for the moto server: {exc.strerror}") from None


def serve(port: int) -> None:
    """The child: serve on ``port`` (0 = any free one), print it, stop when standard input closes."""
    from moto.server import ThreadedMotoServer  # noqa: PLC0415 - only the child imports moto's server

    from local_runtime import moto_speedups  # noqa: PLC0415

    # werkzeug logs every request at INFO: thousands of lines a second here.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto_speedups.install()
    server = ThreadedMotoServer(ip_address=LOOPBACK, port=port, verbose=False)
    server.start()
    _, bound = server.get_host_and_port()
    sys.stdout.write(f"{bound}\n")
    sys.stdout.flush()
    try:
        sys.stdin.buffer.read()  # returns at EOF: the parent closed the pipe, or died
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent stops us too
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    serve(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
