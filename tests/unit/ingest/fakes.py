"""In-memory stand-ins for the two calls the ingest function makes (no network)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from local_runtime.faults import service_error


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

    # The control table's calls: the occupancy marker (conditional put, get) and a day's records (query).

    def put_item(self, **kwargs: Any) -> Mapping[str, Any]:
        item = kwargs["Item"]
        key = (item["pk"]["S"], item["sk"]["S"])
        with self._lock:
            rows = self.tables[kwargs["TableName"]]
            if kwargs.get("ConditionExpression") == "attribute_not_exists(pk)" and key in rows:
                raise service_error("ConditionalCheckFailedException", "PutItem", "The conditional request failed")
            rows[key] = item
        return {}

    def get_item(self, **kwargs: Any) -> Mapping[str, Any]:
        key = (kwargs["Key"]["pk"]["S"], kwargs["Key"]["sk"]["S"])
        with self._lock:
            found = self.tables[kwargs["TableName"]].get(key)
        return {} if found is None else {"Item": found}

    def query(self, **kwargs: Any) -> Mapping[str, Any]:
        """``pk = :pk`` with an optional ``begins_with(sk, :prefix)``, one page."""
        values = kwargs["ExpressionAttributeValues"]
        pk = values[":pk"]["S"]
        prefix = values.get(":prefix", {"S": ""})["S"]
        with self._lock:
            self.queries = getattr(self, "queries", 0) + 1
            rows = [
                item
                for (ipk, isk), item in sorted(self.tables[kwargs["TableName"]].items())
                if ipk == pk and isk.startswith(prefix)
            ]
        return {"Items": rows, "Count": len(rows), "ConsumedCapacity": {"CapacityUnits": 0.5}}


def sqs_allows(text: str) -> bool:
    """SQS's rule, written from its documentation (independent of the code under test):
    #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF."""
    return all(
        c in "\t\n\r" or 0x20 <= ord(c) <= 0xD7FF or 0xE000 <= ord(c) <= 0xFFFD or 0x10000 <= ord(c) <= 0x10FFFF
        for c in text
    )


def sqs_refusal(entry: Mapping[str, Any]) -> str | None:
    """Why SQS would refuse this SendMessageBatch entry, or None: the XML character set in
    the body and every attribute, and 256 KiB per message (moto checks neither)."""
    texts = [entry["MessageBody"]]
    size = len(entry["MessageBody"].encode("utf-8"))
    for name, attribute in (entry.get("MessageAttributes") or {}).items():
        texts += [name, attribute["DataType"], attribute["StringValue"]]
        size += sum(len(t.encode("utf-8")) for t in texts[-3:])
    for text in texts:
        if not sqs_allows(text):
            return f"InvalidMessageContents: invalid characters in {text[:40]!r}"
    if size > 256 * 1024:
        return f"MessageTooLong: {size} bytes"
    return None


class FakeSQS:
    """``send_message_batch`` into a list, enforcing the 10-entry and 256 KiB limits and
    refusing entries SQS would refuse for their content (as sender faults, like SQS)."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.refused: list[str] = []
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
        refused = {e["Id"]: why for e in entries if (why := sqs_refusal(e))}
        with self._lock:
            self.messages.extend(e for e in entries if e["Id"] not in refused)
            self.refused.extend(refused.values())
        return {
            "Successful": [{"Id": e["Id"]} for e in entries if e["Id"] not in refused],
            "Failed": [
                {"Id": i, "SenderFault": True, "Code": why.split(":")[0], "Message": why} for i, why in refused.items()
            ],
        }
