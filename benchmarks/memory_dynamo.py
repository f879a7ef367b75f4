"""An in-memory stand-in for the DynamoDB client calls the rollup store makes (low-level item shapes),
for the rollup benchmark and tests.

Query supports ``pk = :pk`` with an optional ``sk BETWEEN :low AND :high`` and
pages of ``page_items``; BatchGetItem leaves keys past ``get_limit`` unprocessed;
``fail_writes`` makes the next BatchWriteItem calls raise, as a run dying half-way would.
Writes are counted per kind of partition key (the text before its first ``#``), with their write
units; reads report the read units DynamoDB would (item sizes by its rules, 4 KB units).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from adapters.rollup_store import plain
from keydesign import item_size, read_units, write_units


def _size(item: dict[str, Any]) -> int:
    return item_size({k: plain(v) for k, v in item.items()})


# ruff: noqa: N803  (the client's own parameter names)


class MemoryDynamo:
    def __init__(self, page_items: int = 7, get_limit: int = 40) -> None:
        self.items: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.page_items = page_items
        self.get_limit = get_limit
        self.fail_writes = 0
        self.calls: dict[str, int] = {}
        self.written: Counter[str] = Counter()
        self.write_units: Counter[str] = Counter()

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def put_item(self, *, TableName: str, Item: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._count("put_item")
        self._store(TableName, Item)
        return {}

    def get_item(self, *, TableName: str, Key: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._count("get_item")
        found = self.items.get((TableName, Key["pk"]["S"], Key["sk"]["S"]))
        return {"Item": found} if found is not None else {}

    def batch_write_item(self, **kwargs: Any) -> dict[str, Any]:
        self._count("batch_write_item")
        request_items: dict[str, list[dict[str, Any]]] = kwargs["RequestItems"]
        if self.fail_writes:
            self.fail_writes -= 1
            raise ConnectionError("injected: the run dies here")
        for table, requests in request_items.items():
            for request in requests:
                self._store(table, request["PutRequest"]["Item"])
        return {"UnprocessedItems": {}}

    def _store(self, table: str, item: dict[str, Any]) -> None:
        kind = item["pk"]["S"].split("#", 1)[0]
        self.written[kind] += 1
        self.write_units[kind] += write_units(_size(item))
        self.items[(table, item["pk"]["S"], item["sk"]["S"])] = item

    def batch_get_item(self, *, RequestItems: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._count("batch_get_item")
        ((table, request),) = RequestItems.items()
        keys = request["Keys"]
        found = [
            self.items[(table, k["pk"]["S"], k["sk"]["S"])]
            for k in keys[: self.get_limit]
            if (table, k["pk"]["S"], k["sk"]["S"]) in self.items
        ]
        rest = keys[self.get_limit :]
        return {
            "Responses": {table: found},
            "UnprocessedKeys": {table: {"Keys": rest}} if rest else {},
            # Each key is a GetItem's worth: at least one 4 KB unit, found or not.
            "ConsumedCapacity": [
                {
                    "CapacityUnits": sum(
                        read_units(_size(item), consistent=request.get("ConsistentRead", False)) for item in found
                    )
                    + read_units(0) * (len(keys[: self.get_limit]) - len(found))
                }
            ],
        }

    def query(self, *, TableName: str, ExpressionAttributeValues: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        self._count("query")
        pk = ExpressionAttributeValues[":pk"]["S"]
        low = ExpressionAttributeValues.get(":low", {}).get("S")
        high = ExpressionAttributeValues.get(":high", {}).get("S")
        start = kwargs.get("ExclusiveStartKey", {}).get("sk", {}).get("S")
        rows = sorted(
            (sk, item)
            for (table, p, sk), item in self.items.items()
            if table == TableName and p == pk and (low is None or low <= sk <= high) and (start is None or sk > start)
        )
        page = [item for _, item in rows[: self.page_items]]
        units = read_units(sum(_size(item) for item in page), consistent=kwargs.get("ConsistentRead", False))
        out: dict[str, Any] = {"Items": page, "ConsumedCapacity": {"CapacityUnits": units}}
        if len(rows) > self.page_items:
            out["LastEvaluatedKey"] = {"pk": {"S": pk}, "sk": page[-1]["sk"]}
        return out
