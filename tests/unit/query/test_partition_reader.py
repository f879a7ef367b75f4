"""The DynamoDB data-access layer: the Query it builds and how it reads the answer (botocore Stubber)."""

from __future__ import annotations

import re
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from adapters.partition_reader import DynamoPartitionReader, PageRequest, build_query, effective_bounds
from keydesign import PartitionQuery

HOSTILE = 'x" OR "1"="1 ) AND attribute_exists(#pk) :pk'
PART = PartitionQuery("readings", f"{HOSTILE}#0", "2026-11-22T06:00:00.000Z", "2026-11-22T06:59:59.999Z#~", 0, 1)
WHOLE = PartitionQuery("readings", "0001#2026-11-22T06:00", None, None, 1_795_000_000_000, 1_795_000_060_000, True)


def test_every_value_is_a_placeholder_never_part_of_an_expression() -> None:
    # Given a request whose every value is hostile text
    resume = f"2026-11-22T06:30:00.000Z#{HOSTILE}"
    request = PageRequest(PART, sk_low=resume, measures=("temp", "rh"), now_epoch_s=1_795_000_000)

    kwargs = build_query(request)

    assert kwargs is not None
    expressions = " ".join(
        kwargs[name] for name in ("KeyConditionExpression", "FilterExpression", "ProjectionExpression")
    )
    # Then only placeholders, operators and function names appear in the expressions
    assert HOSTILE not in expressions
    tokens = set(re.findall(r"[^\s,()]+", expressions))
    allowed = {"=", "AND", "OR", "BETWEEN", ">=", "<=", "attribute_not_exists"}
    assert all(t in allowed or re.fullmatch(r"[#:][a-z_0-9]+(\.#[a-z_0-9]+)?", t) for t in tokens), tokens
    assert kwargs["ExpressionAttributeValues"][":pk"] == {"S": PART.pk}
    assert kwargs["ExpressionAttributeValues"][":sk_low"] == {"S": resume}
    assert kwargs["ExpressionAttributeNames"]["#m0"] == "temp"


def test_bounds_narrow_to_the_tighter_of_partition_and_request() -> None:
    assert effective_bounds(PageRequest(PART)) == (PART.sk_low, PART.sk_high)
    inside = "2026-11-22T06:30:00.000Z#e1"
    assert effective_bounds(PageRequest(PART, sk_low=inside)) == (inside, PART.sk_high)
    assert effective_bounds(PageRequest(PART, sk_high=inside)) == (PART.sk_low, inside)
    assert effective_bounds(PageRequest(PART, sk_low="2026-01-01")) == (PART.sk_low, PART.sk_high)


def test_an_empty_narrowed_range_asks_dynamodb_nothing() -> None:
    assert build_query(PageRequest(PART, sk_low="2026-11-22T07:00:00.000Z")) is None


@pytest.mark.parametrize(
    ("sk_low", "sk_high", "condition"),
    [
        (None, None, "#pk = :pk"),
        ("a", None, "#pk = :pk AND #sk >= :sk_low"),
        (None, "b", "#pk = :pk AND #sk <= :sk_high"),
        ("a", "b", "#pk = :pk AND #sk BETWEEN :sk_low AND :sk_high"),
    ],
)
def test_the_key_condition_follows_the_bounds(sk_low: str | None, sk_high: str | None, condition: str) -> None:
    kwargs = build_query(PageRequest(WHOLE, sk_low=sk_low, sk_high=sk_high))

    assert kwargs is not None
    assert kwargs["KeyConditionExpression"] == condition


def test_a_partial_bucket_is_filtered_on_time_and_expired_items_are_hidden() -> None:
    kwargs = build_query(PageRequest(WHOLE, now_epoch_s=1_795_000_000, descending=True, consistent=True, limit=5))

    assert kwargs is not None
    assert kwargs["FilterExpression"] == "#t BETWEEN :t_from AND :t_to AND (attribute_not_exists(#ttl) OR #ttl >= :now)"
    assert kwargs["ExpressionAttributeValues"][":t_from"] == {"S": "2026-11-18T11:06:40.000Z"}
    assert kwargs["ExpressionAttributeValues"][":t_to"] == {"S": "2026-11-18T11:07:39.999Z"}
    assert kwargs["ExpressionAttributeValues"][":now"] == {"N": "1795000000"}
    assert kwargs["ScanIndexForward"] is False
    assert kwargs["ConsistentRead"] is True
    assert kwargs["Limit"] == 5


def stubbed() -> tuple[DynamoPartitionReader, Stubber]:
    client = boto3.client(
        "dynamodb", region_name="eu-west-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return DynamoPartitionReader(client), Stubber(client)


def raw_item(sk: str, **extra: Any) -> dict[str, Any]:
    return {
        "sk": {"S": sk},
        "e": {"S": "sensor-1"},
        "t": {"S": "2026-11-22T06:00:00.000Z"},
        "i": {"S": "evt-1"},
        "m": {"M": {"temp": {"N": "21.5"}, "count": {"N": "3"}, "big": {"N": "1E+2"}}},
        **extra,
    }


def test_a_page_is_decoded_with_its_continuation_and_cost() -> None:
    reader, stub = stubbed()
    request = PageRequest(PART, limit=2)
    stub.add_response(
        "query",
        {
            "Items": [raw_item("a", d={"M": {"site": {"S": "plant-7"}}}), {"pk": {"S": "foreign"}}],
            "Count": 2,
            "ScannedCount": 3,
            "LastEvaluatedKey": {"pk": {"S": PART.pk}, "sk": {"S": "a"}},
            "ConsumedCapacity": {"TableName": "readings", "CapacityUnits": 1.5},
        },
        build_query(request),
    )

    with stub:
        page = reader.read_page(request)

    assert [i.sk for i in page.items] == ["a"]  # the item that is not a reading is dropped
    assert page.items[0].measures == {"temp": 21.5, "count": 3, "big": 100.0}
    assert page.items[0].dimensions == {"site": "plant-7"}
    assert page.next_key == {"pk": {"S": PART.pk}, "sk": {"S": "a"}}
    assert (page.scanned, page.read_units, page.table_missing) == (3, 1.5, False)


def test_a_missing_table_is_an_empty_page_flagged_as_such() -> None:
    reader, stub = stubbed()
    stub.add_client_error("query", "ResourceNotFoundException", "Requested resource not found")

    with stub:
        page = reader.read_page(PageRequest(PART))

    assert page.items == ()
    assert page.next_key is None
    assert page.table_missing


def test_other_errors_propagate() -> None:
    reader, stub = stubbed()
    stub.add_client_error("query", "ProvisionedThroughputExceededException", "slow down")

    with stub, pytest.raises(ClientError):
        reader.read_page(PageRequest(PART))


def test_an_empty_range_makes_no_call() -> None:
    reader, stub = stubbed()

    with stub:  # no response queued: a call would fail
        page = reader.read_page(PageRequest(PART, sk_low="zzz"))

    assert page.items == ()
