"""In-memory stand-ins for the two calls the ingest function makes (no network)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from adapters.faults import service_error


class FakeDynamoDB:
    """``batch_write_item`` into dicts, refusing what DynamoDB refuses (duplicates, >25 items)."""

    def __init__(self, tables: set[str] | None = None, refuse: Callable[[Mapping[str, Any]], str | None] | None = None):
        self.tables: dict[str, dict[tuple[str, str], dict[str, Any]]] = {t: {} for t in (tables or {"readings"})}
        self.refuse = refuse
        self.calls: list[dict[str, list[Any]]] = []
        self.puts = 0
        self._lock = threading.Lock()

    def batch_write_item(self, **kwargs: Any) -> Mapping[str, Any]:
        request: dict[str, list[Any]] = kwargs["RequestItems"]
        with self._lock:
            self.calls.append(request)
        count = sum(len(r) for r in request.values())
        if count > 25:
            raise service_error("ValidationException", "BatchWriteItem", "Too many items requested")
        keys = [
            (t, r["PutRequest"]["Item"]["pk"]["S"], r["PutRequest"]["Item"]["sk"]["S"])
            for t, rs in request.items()
            for r in rs
        ]
        if len(set(keys)) != len(keys):
            raise service_error(
                "ValidationException", "BatchWriteItem", "Provided list of item keys contains duplicates"
            )
        for table in request:
            if table not in self.tables:
                raise service_error("ResourceNotFoundException", "BatchWriteItem", "Requested resource not found")
        for requests in request.values():
            for r in requests:
                item = r["PutRequest"]["Item"]
                if self.refuse is not None and (why := self.refuse(item)):
                    raise service_error("ValidationException", "BatchWriteItem", why)
        with self._lock:
            for table, requests in request.items():
                for r in requests:
                    item = r["PutRequest"]["Item"]
                    self.tables[table][(item["pk"]["S"], item["sk"]["S"])] = item
                    self.puts += 1
        return {
            "UnprocessedItems": {},
            "ConsumedCapacity": [{"TableName": t, "CapacityUnits": float(len(r))} for t, r in request.items()],
        }

    def items(self, table: str = "readings") -> list[dict[str, Any]]:
        return list(self.tables[table].values())


class FakeSQS:
    """``send_message_batch`` into a list, enforcing the 10-entry and 256 KiB limits."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.calls: list[list[dict[str, Any]]] = []
        self._lock = threading.Lock()

    def send_message_batch(self, **kwargs: Any) -> Mapping[str, Any]:
        entries: list[dict[str, Any]] = kwargs["Entries"]
        with self._lock:
            self.calls.append(entries)
        if len(entries) > 10:
            raise service_error("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", "SendMessageBatch")
        size = sum(len(e["MessageBody"]) for e in entries)
        if size > 256 * 1024:
            raise service_error("AWS.SimpleQueueService.BatchRequestTooLong", "SendMessageBatch")
        with self._lock:
            self.messages.extend(entries)
        return {"Successful": [{"Id": e["Id"]} for e in entries], "Failed": []}
