"""Stand-ins for DynamoDB: a loopback one that counts connections, for the tests of pooled connections,
and a throttled BatchGetItem, for the readers of unprocessed keys (``adapters.retry.batch_get``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


class EmptyListTables(BaseHTTPRequestHandler):
    """Answers every call with an empty ListTables, keeping the connection open (HTTP/1.1)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        body = b'{"TableNames": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class CountingDynamoDB(ThreadingHTTPServer):
    """A loopback stand-in for DynamoDB that counts the TCP connections it accepts."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), EmptyListTables)
        self.connections = 0

    def process_request(self, request: Any, client_address: Any) -> None:
        self.connections += 1
        super().process_request(request, client_address)


@pytest.fixture
def dynamodb_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingDynamoDB]:
    server = CountingDynamoDB()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    yield server
    server.shutdown()
    server.server_close()


class ThrottledBatchGets:
    """BatchGetItem over a dict of items that reads at most ``per_call`` keys a call and hands the
    rest back as ``UnprocessedKeys``, as a throttled table does. It is asked of ``table`` only, for
    100 keys at most (and, if ``consistent`` is given, with that ConsistentRead); ``asked`` counts
    the keys of each call."""

    def __init__(
        self, table: str, items: list[Mapping[str, Any]], per_call: int, *, consistent: bool | None = None
    ) -> None:
        self.table = table
        self.items = {(item["pk"]["S"], item["sk"]["S"]): item for item in items}
        self.per_call = per_call
        self.consistent = consistent
        self.asked: list[int] = []

    def batch_get_item(self, **kwargs: Any) -> Mapping[str, Any]:
        ((table, request),) = kwargs["RequestItems"].items()
        keys = request["Keys"]
        assert table == self.table and len(keys) <= 100
        assert self.consistent is None or request["ConsistentRead"] is self.consistent
        self.asked.append(len(keys))
        read, rest = keys[: self.per_call], keys[self.per_call :]
        found = [self.items[k] for k in ((key["pk"]["S"], key["sk"]["S"]) for key in read) if k in self.items]
        answer: dict[str, Any] = {"Responses": {table: found}, "ConsumedCapacity": [{"CapacityUnits": 0.5 * len(read)}]}
        return answer | ({"UnprocessedKeys": {table: {"Keys": rest}}} if rest else {})
