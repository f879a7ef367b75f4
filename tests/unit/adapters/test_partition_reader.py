"""The DynamoDB data-access layer: the Query it builds and how it reads the blocks back (botocore Stubber)."""

from __future__ import annotations

import re

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from adapters.partition_reader import (
    CorruptBlock,
    DynamoPartitionReader,
    PageRequest,
    StoredBlock,
    build_query,
    decode,
    effective_bounds,
)
from keydesign import Layout, PartitionQuery, Reading, ShardMap

HOSTILE = 'x" OR "1"="1 ) AND attribute_exists(#pk) :pk'
PART = PartitionQuery("readings", f"{HOSTILE}#0", "2026-11-22T06:00:00.000Z", "2026-11-22T06:59:59.999Z#~", 0, 1)
LAYOUT = Layout.from_settings(kind="random", bucket="1h", table_prefix="readings")
READING = Reading("sensor-1", "evt-1", 1_795_000_000_000, {"temp": 21.5, "count": 3, "big": 1e100}, {"site": "p-7"})
WHOLE = PartitionQuery("readings", "0001#2026-11-22T06:00", None, None, 1_795_000_000_000, 1_795_000_060_000, True)


def test_every_value_is_a_placeholder_never_part_of_an_expression() -> None:
    # Given a request whose every value is hostile text
    resume = f"2026-11-22T06:30:00.000Z#{HOSTILE}"
    request = PageRequest(PART, sk_low=resume, now_epoch_s=1_795_000_000)

    kwargs = build_query(request)

    assert kwargs is not None
    expressions = " ".join(
        kwargs[name] for name in ("KeyConditionExpression", "FilterExpression", "ProjectionExpression")
    )
    # Then only placeholders, operators and function names appear in the expressions
    assert HOSTILE not in expressions
    tokens = set(re.findall(r"[^\s,()]+", expressions))
    allowed = {"=", "AND", "OR", "BETWEEN", ">=", "<=", "attribute_not_exists"}
    assert all(t in allowed or re.fullmatch(r"[#:][a-z_0-9]+", t) for t in tokens), tokens
    assert kwargs["ExpressionAttributeValues"][":pk"] == {"S": PART.pk}
    assert kwargs["ExpressionAttributeValues"][":sk_low"] == {"S": resume}
    # Only the key and the payload come back (a block is decoded, never projected), or an item
    # of the format before blocks: its reading's attributes
    assert kwargs["ProjectionExpression"] == "#sk, #b, #e, #t, #i, #m, #d, #r"
    assert kwargs["ExpressionAttributeNames"] == {
        "#pk": "pk",
        "#sk": "sk",
        "#b": "b",
        "#ttl": "ttl",
        **{f"#{name}": name for name in "etimdr"},
    }


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


def test_expired_blocks_are_hidden_and_a_partial_bucket_is_not_filtered_on_the_server() -> None:
    # A block may hold readings on both sides of the range's edge: they are dropped once decoded
    kwargs = build_query(PageRequest(WHOLE, now_epoch_s=1_795_000_000, descending=True, consistent=True, limit=5))

    assert kwargs is not None
    assert kwargs["FilterExpression"] == "attribute_not_exists(#ttl) OR #ttl >= :now"
    assert kwargs["ExpressionAttributeValues"][":now"] == {"N": "1795000000"}
    assert kwargs["ScanIndexForward"] is False
    assert kwargs["ConsistentRead"] is True
    assert kwargs["Limit"] == 5


def stubbed() -> tuple[DynamoPartitionReader, Stubber]:
    client = boto3.client(
        "dynamodb", region_name="eu-west-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    return DynamoPartitionReader(client), Stubber(client)


def test_a_page_hands_back_its_blocks_undecoded_with_its_continuation_and_cost() -> None:
    # Given two stored blocks, the second without a payload (not a block this code wrote)
    (block,) = LAYOUT.pack([(READING, 7)], ShardMap.initial(LAYOUT.bucket, 1))
    reader, stub = stubbed()
    request = PageRequest(PART, limit=2)
    stub.add_response(
        "query",
        {
            "Items": [{"sk": {"S": block.key.sk}, "b": {"B": block.encoded.payload}}, {"sk": {"S": "other"}}],
            "Count": 2,
            "ScannedCount": 3,
            "LastEvaluatedKey": {"pk": {"S": PART.pk}, "sk": {"S": "other"}},
            "ConsumedCapacity": {"TableName": "readings", "CapacityUnits": 1.5},
        },
        build_query(request),
    )

    with stub:
        page = reader.read_page(request)

    # Then both come back: the block decodes to its reading, the other fails loudly when decoded
    assert page.blocks == (StoredBlock(block.key.sk, block.encoded.payload), StoredBlock("other", b""))
    assert decode(PART, page.blocks[0], READING.entity_id)[1] == [READING]
    with pytest.raises(CorruptBlock, match="'other' of table 'readings' is not a readable block: the payload is empty"):
        decode(PART, page.blocks[1], READING.entity_id)
    assert page.next_key == {"pk": {"S": PART.pk}, "sk": {"S": "other"}}
    assert (page.scanned, page.read_units, page.table_missing) == (3, 1.5, False)


def test_a_missing_table_is_an_empty_page_flagged_as_such() -> None:
    reader, stub = stubbed()
    stub.add_client_error("query", "ResourceNotFoundException", "Requested resource not found")

    with stub:
        page = reader.read_page(PageRequest(PART))

    assert page.blocks == ()
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

    assert page.blocks == ()
