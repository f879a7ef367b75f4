"""An in-memory stand-in for the DynamoDB client calls the rollup store makes (low-level item shapes).

Query supports ``pk = :pk`` with an optional ``sk BETWEEN :low AND :high`` and
pages of ``page_items``; BatchGetItem leaves keys past ``get_limit`` unprocessed;
``fail_writes`` makes the next BatchWriteItem calls raise, as a run dying half-way would.
"""

from __future__ import annotations

from typing import Any

# ruff: noqa: N803  (the client's own parameter names)


class FakeDynamo:
    def __init__(self, page_items: int = 7, get_limit: int = 40) -> None:
        self.items: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.page_items = page_items
        self.get_limit = get_limit
        self.fail_writes = 0
        self.calls: dict[str, int] = {}

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def put_item(self, *, TableName: str, Item: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._count("put_item")
        self.items[(TableName, Item["pk"]["S"], Item["sk"]["S"])] = Item
        return {}

    def get_item(self, *, TableName: str, Key: dict[str, Any], **_: Any) -> dict[str, Any]:
        self._count("get_item")
        found = self.items.get((TableName, Key["pk"]["S"], Key["sk"]["S"]))
        return {"Item": found} if found is not None else {}

    def batch_write_item(self, *, RequestItems: dict[str, list[dict[str, Any]]], **_: Any) -> dict[str, Any]:
        self._count("batch_write_item")
        if self.fail_writes:
            self.fail_writes -= 1
            raise ConnectionError("injected: the run dies here")
        for table, requests in RequestItems.items():
            for request in requests:
                item = request["PutRequest"]["Item"]
                self.items[(table, item["pk"]["S"], item["sk"]["S"])] = item
        return {"UnprocessedItems": {}}

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
            "ConsumedCapacity": [{"CapacityUnits": 0.5 * len(keys[: self.get_limit])}],
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
        out: dict[str, Any] = {"Items": page, "ConsumedCapacity": {"CapacityUnits": 0.5}}
        if len(rows) > self.page_items:
            out["LastEvaluatedKey"] = {"pk": {"S": pk}, "sk": page[-1]["sk"]}
        return out
