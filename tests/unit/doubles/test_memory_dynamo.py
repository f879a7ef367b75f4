"""The in-memory DynamoDB refuses what DynamoDB refuses, or the tests that lean on its refusals prove nothing."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from doubles.memory_dynamo import MemoryDynamo


def _put(n: int) -> dict[str, Any]:
    return {"PutRequest": {"Item": {"pk": {"S": "p"}, "sk": {"S": f"s{n:02d}"}}}}


@pytest.mark.parametrize(
    ("request_items", "code"),
    [
        ({"readings": [_put(n) for n in range(26)]}, "ValidationException"),  # more than 25
        ({"readings": [_put(1), _put(1)]}, "ValidationException"),  # a key twice
        ({"readings": [_put(1)], "other": [_put(2)]}, "ResourceNotFoundException"),
        ({"readings": [_put(1), _put(99)]}, "ValidationException"),  # one item the hook refuses fails the call
    ],
)
def test_a_refused_batch_write_stores_nothing_and_is_recorded(request_items: dict[str, Any], code: str) -> None:
    db = MemoryDynamo(
        tables={"readings"}, refuse=lambda item: "bad" if item["sk"]["S"] == "s99" else None, record_calls=True
    )
    with pytest.raises(ClientError) as refused:
        db.batch_write_item(RequestItems=request_items)
    assert refused.value.response["Error"]["Code"] == code and refused.value.operation_name == "BatchWriteItem"
    assert db.items() == [] and db.items_put == 0 and db.calls == [request_items]


def test_a_batch_write_of_25_is_stored_and_its_units_reported() -> None:
    db = MemoryDynamo(tables={"readings"})
    response = db.batch_write_item(RequestItems={"readings": [_put(n) for n in range(25)]})
    assert response["ConsumedCapacity"] == [{"TableName": "readings", "CapacityUnits": 25.0}]
    assert db.items_put == 25 and sorted(db.table("readings")) == [("p", f"s{n:02d}") for n in range(25)]


def test_a_conditional_put_does_not_overwrite_and_a_missing_table_is_not_found() -> None:
    db = MemoryDynamo(tables={"control"})
    item = {"pk": {"S": "p"}, "sk": {"S": "s"}, "v": {"N": "1"}}
    db.put_item(TableName="control", Item=item, ConditionExpression="attribute_not_exists(pk)")
    with pytest.raises(ClientError, match="ConditionalCheckFailedException"):
        db.put_item(TableName="control", Item={**item, "v": {"N": "2"}}, ConditionExpression="attribute_not_exists(pk)")
    assert db.get_item(TableName="control", Key={"pk": {"S": "p"}, "sk": {"S": "s"}}) == {"Item": item}
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        db.get_item(TableName="readings", Key={"pk": {"S": "p"}, "sk": {"S": "s"}})
