"""An in-memory SQS for the reject queue: ``send_message_batch`` into a list, with SQS's own refusals."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from doubles.memory_dynamo import client_error


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


class MemorySQS:
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
            raise client_error(
                "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
                "SendMessageBatch",
                f"Maximum number of entries per request are 10. You have sent {len(entries)}.",
            )
        size = sum(len(e["MessageBody"]) for e in entries)
        if size > 256 * 1024:
            raise client_error(
                "AWS.SimpleQueueService.BatchRequestTooLong",
                "SendMessageBatch",
                f"Batch requests cannot be longer than 262144 bytes. You have sent {size} bytes.",
            )
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
