"""The local runtime's moto refuses the numbers DynamoDB refuses (moto alone stores them): more than 38
significant digits, or a magnitude outside 1E-130 .. 9.9999999999999999999999999999999999999E+125, in
every write the functions make (PutItem, UpdateItem, BatchWriteItem, TransactWriteItems), with
DynamoDB's ValidationException and message; the numbers at both edges, positive and negative, go in."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from local_runtime.moto_server import EmbeddedMoto
from local_runtime.moto_speedups import number_refusal
from tests.integration.mocked_aws import create_readings_table

pytestmark = pytest.mark.integration
TABLE = "numbers"
NINES = "9.9999999999999999999999999999999999999"  # 38 significant digits
STORED = [f"{NINES}E+125", f"-{NINES}E+125", "1E-130", "-1E-130", "0", "-0.0", "1" * 38, "1" * 38 + "0" * 50]
REFUSED = {
    "1E+126": "Number overflow",
    "-1E+126": "Number overflow",
    f"{NINES}E-131": "Number underflow",
    f"-{NINES}E-131": "Number underflow",
    "1" * 39: "more than 38 significant digits",
    "1.00000000000000000000000000000000000001": "more than 38 significant digits",
}


@pytest.fixture(scope="module")
def dynamodb() -> Iterator[Any]:
    import boto3  # noqa: PLC0415

    with EmbeddedMoto() as moto:
        client = boto3.client(
            "dynamodb",
            endpoint_url=moto.endpoint_url,
            region_name="eu-west-1",
            aws_access_key_id="x",
            aws_secret_access_key="x",
        )
        create_readings_table(client, TABLE)
        yield client


def _item(n: int, number: str) -> dict[str, Any]:
    return {"pk": {"S": f"p{n}"}, "sk": {"S": "s"}, "v": {"N": number}, "m": {"M": {"deep": {"NS": ["1", number]}}}}


def _writes(dynamodb: Any) -> dict[str, Callable[[int, str], object]]:
    return {
        "PutItem": lambda n, v: dynamodb.put_item(TableName=TABLE, Item=_item(n, v)),
        "BatchWriteItem": lambda n, v: dynamodb.batch_write_item(
            RequestItems={TABLE: [{"PutRequest": {"Item": _item(n, "1")}}, {"PutRequest": {"Item": _item(n + 1, v)}}]}
        ),
        "UpdateItem": lambda n, v: dynamodb.update_item(
            TableName=TABLE,
            Key={"pk": {"S": f"p{n}"}, "sk": {"S": "s"}},
            UpdateExpression="SET v = :v",
            ExpressionAttributeValues={":v": {"N": v}},
        ),
        "TransactWriteItems": lambda n, v: dynamodb.transact_write_items(
            TransactItems=[{"Put": {"TableName": TABLE, "Item": _item(n, v)}}]
        ),
    }


@pytest.mark.parametrize("operation", ["PutItem", "BatchWriteItem", "UpdateItem", "TransactWriteItems"])
def test_numbers_dynamodb_refuses_are_refused_and_the_edges_stored(dynamodb: Any, operation: str) -> None:
    write = _writes(dynamodb)[operation]
    for n, (number, message) in enumerate(REFUSED.items()):
        with pytest.raises(ClientError) as refused:
            write(1_000 + 10 * n, number)
        error = refused.value.response["Error"]
        assert (error["Code"], message in error["Message"]) == ("ValidationException", True), number
        key = {"pk": {"S": f"p{1_000 + 10 * n}"}, "sk": {"S": "s"}}
        assert "Item" not in dynamodb.get_item(TableName=TABLE, Key=key)
    for n, number in enumerate(STORED):
        write(10 * n, number)


def test_the_check_reads_a_number_as_dynamodb_does() -> None:
    assert [number_refusal(n) for n in STORED] == [None] * len(STORED)
    assert all(message in (number_refusal(n) or "") for n, message in REFUSED.items())
    assert "cannot be converted" in (number_refusal("NaN") or "")
