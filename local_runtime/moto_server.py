"""moto's server, embedded: started on a free loopback port, stopped on exit.

moto keeps its state in module-level backends, shared by every server in the
process; the server is reset when it starts (a previous system in the same
process, e.g. another test, leaves nothing behind) and when it stops (the
memory goes back).
"""

from __future__ import annotations

import logging
import socket
import urllib.request
from types import TracebackType

from moto.server import ThreadedMotoServer

from local_runtime.environment import assert_loopback

LOOPBACK = "127.0.0.1"
_log = logging.getLogger(__name__)


class EmbeddedMoto:
    """``with EmbeddedMoto() as moto: moto.endpoint_url`` -> ``http://127.0.0.1:<port>``."""

    def __init__(self, port: int = 0) -> None:
        self._requested_port = port
        self._server: ThreadedMotoServer | None = None
        self._endpoint_url: str | None = None
        self._werkzeug_level: int | None = None

    @property
    def endpoint_url(self) -> str:
        if self._endpoint_url is None:
            raise RuntimeError("the moto server is not running")
        return self._endpoint_url

    def start(self) -> str:
        if self._server is not None:
            return self.endpoint_url
        if self._requested_port:
            _refuse_taken_port(self._requested_port)
        # werkzeug logs every request at INFO: thousands of lines a second here.
        werkzeug = logging.getLogger("werkzeug")
        self._werkzeug_level = werkzeug.level
        werkzeug.setLevel(logging.WARNING)
        server = ThreadedMotoServer(ip_address=LOOPBACK, port=self._requested_port, verbose=False)
        server.start()
        self._server = server
        host, port = server.get_host_and_port()
        self._endpoint_url = assert_loopback(f"http://{host}:{port}")
        self.reset()
        _log.info("moto server on %s", self._endpoint_url)
        return self._endpoint_url

    def reset(self) -> None:
        """Forget every resource moto holds (all services, all regions)."""
        request = urllib.request.Request(f"{self.endpoint_url}/moto-api/reset", data=b"", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - a loopback URL, checked
            response.read()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        try:
            self.reset()
        except OSError as exc:  # a server that no longer answers has nothing left to free
            _log.warning("moto reset on stop failed: %s", exc)
        server.stop()
        self._endpoint_url = None
        if self._werkzeug_level is not None:
            logging.getLogger("werkzeug").setLevel(self._werkzeug_level)

    def __enter__(self) -> EmbeddedMoto:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _refuse_taken_port(port: int) -> None:
    # ThreadedMotoServer binds in its own thread and waits for it forever: a
    # port already taken would hang the start instead of failing it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError as exc:
            raise OSError(f"port {port} on {LOOPBACK} is not free for the moto server: {exc.strerror}") from None
