"""Lambda's Invoke API on loopback, for the local functions: what a boto3 Lambda client calls.

``POST /2015-03-31/functions/<name or ARN>/invocations`` with the header
``X-Amz-Invocation-Type``, as botocore sends it, so the code that invokes a
function in AWS runs unchanged against the local system: ingest asks the
rotator to build a missing table (``InvocationType="Event"``, its client
pointed here by ``AWS_ENDPOINT_URL_LAMBDA``), and ``tsctl replay run
--lambda-endpoint-url`` puts failed batches through ingest or the hot-key
function (``RequestResponse``).

As Lambda answers:

* ``RequestResponse``: 200 and the function's result as JSON; a function that
  failed (raised, timed out, or an injected invocation error) is still a 200,
  with ``X-Amz-Function-Error: Unhandled`` and ``{"errorMessage", "errorType"}``;
* ``Event``: 202 at once; the function runs on a thread of its own, and a failed
  run is tried twice more (Lambda's default for asynchronous invocations, here
  ``retry_delays_s`` apart instead of one and two minutes);
* ``DryRun``: 204;
* a function that is not running: 404 ``ResourceNotFoundException``; a body
  that is not JSON: 400 ``InvalidRequestContentException``.

Invocations share the system's invocation gate like every trigger, which is why
an asynchronous invocation cannot deadlock an invocation that makes it (ingest
holds the gate while it asks). A function that invoked another *synchronously*
from its handler would wait for the gate it holds: none does.
Not emulated: qualifiers (every name is ``$LATEST``), ``X-Amz-Log-Type``
tails, client contexts, destinations of asynchronous invocations.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote, urlsplit

from local_runtime.environment import LoopbackServer
from local_runtime.functions import FunctionError, LocalFunction

_log = logging.getLogger(__name__)

_PATH_HEAD = "/2015-03-31/functions/"
_PATH_TAIL = "/invocations"


def function_name(reference: str) -> str:
    """The function a name, full ARN or partial ARN refers to (``...:function:<name>[:qualifier]``)."""
    if ":function:" in reference:
        return reference.split(":function:", 1)[1].split(":", 1)[0]
    return reference.split(":", 1)[0]


@dataclass(eq=False)
class LambdaInvokeApi:
    """``start()`` serves Invoke for the functions ``find`` returns (by name); ``url`` is its endpoint."""

    find: Callable[[str], LocalFunction | None]
    _: KW_ONLY
    retry_delays_s: Sequence[float] = (1.0, 2.0)
    #: Asynchronous invocations that failed every attempt: (function, error).
    failed_events: list[tuple[str, str]] = field(default_factory=list, init=False)
    _server: LoopbackServer | None = field(default=None, init=False)
    _running: set[threading.Thread] = field(default_factory=set, init=False)
    _stopping: threading.Event = field(default_factory=threading.Event, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the Lambda API is not running")
        return self._server.url

    def start(self) -> str:
        if self._server is None:
            self._server = LoopbackServer(self._handle, port=0, name="lambda-api")
        return self._server.url

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop serving; wait up to ``timeout_s`` for asynchronous invocations still running."""
        self._stopping.set()
        server, self._server = self._server, None
        if server is not None:
            server.stop()
        deadline = time.monotonic() + timeout_s
        with self._lock:
            running = list(self._running)
        for thread in running:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))

    # -- one request -----------------------------------------------------------------------

    def _handle(self, http: BaseHTTPRequestHandler) -> None:
        length = int(http.headers.get("Content-Length") or 0)
        body = http.rfile.read(length) if length > 0 else b""
        path = urlsplit(http.path).path
        if http.command != "POST" or not (path.startswith(_PATH_HEAD) and path.endswith(_PATH_TAIL)):
            self._error(http, 404, "UnknownOperationException", f"not an Invoke request: {http.command} {path}")
            return
        reference = unquote(path[len(_PATH_HEAD) : -len(_PATH_TAIL)])
        function = self.find(function_name(reference))
        if function is None:
            self._error(http, 404, "ResourceNotFoundException", f"Function not found: {reference}")
            return
        try:
            event = json.loads(body) if body else {}
        except ValueError:
            self._error(http, 400, "InvalidRequestContentException", "Could not parse request body into json")
            return
        kind = http.headers.get("X-Amz-Invocation-Type", "RequestResponse")
        if kind == "DryRun":
            self._send(http, 204, b"")
        elif kind == "Event":
            self._start_async(function, event)
            self._send(http, 202, b"")
        else:
            self._invoke(http, function, event)

    def _invoke(self, http: BaseHTTPRequestHandler, function: LocalFunction, event: Any) -> None:
        try:
            result = function.invoke(event)
        except FunctionError as error:
            cause = error.__cause__ or error
            body = {"errorMessage": str(cause), "errorType": type(cause).__name__}
            self._send(http, 200, json.dumps(body).encode(), [("X-Amz-Function-Error", "Unhandled")])
            return
        self._send(http, 200, json.dumps(result).encode())

    def _start_async(self, function: LocalFunction, event: Any) -> None:
        thread = threading.Thread(target=self._run_async, args=(function, event), name=f"event-{function.name}")
        with self._lock:
            self._running.add(thread)
        thread.start()

    def _run_async(self, function: LocalFunction, event: Any) -> None:
        try:
            for delay in (*self.retry_delays_s, None):
                try:
                    function.invoke(event)
                    return
                except FunctionError as error:
                    if delay is None or self._stopping.wait(delay):
                        _log.error("asynchronous invocation of %s failed every attempt: %s", function.name, error)
                        with self._lock:
                            self.failed_events.append((function.name, str(error)))
                        return
                    _log.warning("asynchronous invocation of %s failed, retried: %s", function.name, error)
        finally:
            with self._lock:
                self._running.discard(threading.current_thread())

    @staticmethod
    def _send(http: BaseHTTPRequestHandler, status: int, body: bytes, headers: Sequence[tuple[str, str]] = ()) -> None:
        http.send_response(status)
        http.send_header("Content-Type", "application/json")
        http.send_header("Content-Length", str(len(body)))
        http.send_header("X-Amz-Executed-Version", "$LATEST")
        for name, value in headers:
            http.send_header(name, value)
        http.end_headers()
        if body:
            http.wfile.write(body)

    def _error(self, http: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        body = json.dumps({"Type": "User", "message": message}).encode()
        self._send(http, status, body, [("x-amzn-ErrorType", code)])
