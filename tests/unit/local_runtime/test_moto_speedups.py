"""The speed-ups give moto's own results (the keyed table order, the top-level projection, the item
serialisation), and are undone when the last user stops."""

from __future__ import annotations

import base64
import contextlib
import random
import threading
from typing import Any

import pytest
from moto.dynamodb.models.dynamo_type import Item
from moto.dynamodb.models.table import Table

from local_runtime import moto_speedups


def table(hash_type: str, range_type: str | None) -> Any:
    schema = [{"AttributeName": "pk", "KeyType": "HASH"}]
    attributes = [{"AttributeName": "pk", "AttributeType": hash_type}]
    if range_type is not None:
        schema.append({"AttributeName": "sk", "KeyType": "RANGE"})
        attributes.append({"AttributeName": "sk", "AttributeType": range_type})
    return Table("t", account_id="123456789012", region="eu-west-1", schema=schema, attr=attributes)


def value(kind: str, rng: random.Random) -> dict[str, str]:
    if kind == "N":
        return {"N": str(rng.choice([rng.randint(-50, 50), rng.uniform(-5, 5), 10 ** rng.randint(0, 20)]))}
    alphabet = "ab#-_0129Zz~é"
    return {"S": "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) or "x"}


@pytest.mark.parametrize(("hash_type", "range_type"), [("S", "S"), ("S", "N"), ("N", "S"), ("S", None), ("N", None)])
def test_the_keyed_order_is_moto_s_order(hash_type: str, range_type: str | None) -> None:
    # Given a table of mixed keys (numbers of every size, strings with separators and non-ASCII)
    rng = random.Random(hash((hash_type, range_type)))
    t = table(hash_type, range_type)
    for _ in range(400):
        item = {"pk": value(hash_type, rng), "v": {"S": "x"}}
        if range_type is not None:
            item["sk"] = value(range_type, rng)
        t.put_item(item)
    # When ordered by moto's sort and by the keyed one
    original = [(i.hash_key, i.range_key) for i in Table.all_items(t)]
    keyed = [(i.hash_key, i.range_key) for i in moto_speedups._all_items(t)]
    # Then the orders are the same
    assert keyed == original


def attribute(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    kinds = ["S", "N", "BOOL", "NULL", "SS", "NS"] + (["M", "L"] if depth < 2 else [])
    kind = rng.choice(kinds)
    if kind == "S":
        return value("S", rng)
    if kind == "N":
        return {"N": str(rng.randint(-(10**6), 10**6))}
    if kind == "BOOL":
        return {"BOOL": rng.random() < 0.5}
    if kind == "NULL":
        return {"NULL": True}
    if kind == "SS":
        return {"SS": sorted({f"s{rng.randint(0, 9)}" for _ in range(3)})}
    if kind == "NS":
        return {"NS": sorted({str(rng.randint(0, 9)) for _ in range(3)})}
    if kind == "M":
        return {"M": {f"k{n}": attribute(rng, depth + 1) for n in range(rng.randint(0, 3))}}
    return {"L": [attribute(rng, depth + 1) for _ in range(rng.randint(0, 3))]}


def canonical(item: Any) -> dict[str, Any]:
    """An item's attributes as DynamoDB JSON, sets in a fixed order (moto's round trip may reorder them)."""

    def fix(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: sorted(x) if k in ("SS", "NS") else fix(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fix(x) for x in v]
        return v

    return {"key": (item.hash_key, item.range_key), "attrs": fix(item.to_json()["Attributes"])}


@pytest.mark.parametrize("seed", range(5))
def test_the_top_level_projection_is_moto_s_projection(seed: int) -> None:
    # Given items of every attribute type, nested maps and lists included
    rng = random.Random(seed)
    t = table("S", "S")
    for n in range(100):
        t.put_item({"pk": {"S": f"p{n % 3}"}, "sk": {"S": f"s{n}"}, **{f"a{k}": attribute(rng) for k in range(6)}})
    for item in Table.all_items(t):
        # When projected on top-level attributes (some absent), by moto and by the speed-up
        paths = [[name] for name in rng.sample(["pk", "sk", "a0", "a1", "a2", "a3", "a4", "a5", "absent"], 4)]
        ours = moto_speedups._project(item, paths)
        theirs = Item.project(item, paths)
        # Then the results are the same, and the original item is untouched
        assert canonical(ours) == canonical(theirs)
        assert ours.attrs is not item.attrs


def test_a_nested_projection_goes_to_moto_s_own() -> None:
    t = table("S", "S")
    t.put_item({"pk": {"S": "p"}, "sk": {"S": "s"}, "m": {"M": {"temp": {"N": "1.5"}, "rh": {"N": "40"}}}})
    (item,) = Table.all_items(t)
    assert moto_speedups.install()
    try:
        projected = item.project([["sk"], ["m", "temp"]])
    finally:
        moto_speedups.uninstall()
    assert projected.to_json()["Attributes"] == {"sk": {"S": "s"}, "m": {"M": {"temp": {"N": "1.5"}}}}


def test_install_replaces_moto_s_methods_until_the_last_user_uninstalls() -> None:
    from moto.dynamodb.responses import DynamoResult  # noqa: PLC0415

    originals = (Table.all_items, Item.project, DynamoResult.execute_result)
    ours = (moto_speedups._all_items, moto_speedups._project, moto_speedups._execute_result)

    def current() -> tuple[Any, ...]:
        return (Table.all_items, Item.project, DynamoResult.execute_result)

    assert moto_speedups.install() and moto_speedups.install()
    try:
        assert current() == ours
        moto_speedups.uninstall()
        assert current() == ours  # one user left
    finally:
        moto_speedups.uninstall()
    assert current() == originals
    moto_speedups.uninstall()  # one too many is harmless
    assert current() == originals


def test_moto_answers_one_request_at_a_time() -> None:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication  # noqa: PLC0415

    # Given moto's request dispatcher, and a service slow enough that two requests meet inside it:
    # each waits (up to 0.5 s) for the other to arrive
    meet = threading.Barrier(2, timeout=0.5)
    inside: list[int] = []

    def service(environ: Any, start_response: Any) -> list[bytes]:
        inside.append(1)
        with contextlib.suppress(threading.BrokenBarrierError):
            meet.wait()
        most = len(inside)
        inside.pop()
        return [str(most).encode()]

    dispatcher = DomainDispatcherApplication(lambda name: service)
    dispatcher.get_application = lambda environ: service
    answers: list[bytes] = []
    assert moto_speedups.install()
    try:
        # When two threads send it a request at once
        requests = [threading.Thread(target=lambda: answers.extend(dispatcher({}, None))) for _ in range(2)]
        for r in requests:
            r.start()
        for r in requests:
            r.join()
    finally:
        moto_speedups.uninstall()
    # Then each was answered alone: neither saw the other inside the service
    assert answers == [b"1", b"1"]


def pages(client: Any) -> list[dict[str, Any]]:
    """A Query (projected, paged, filtered) and a Scan: what boto3 parses from moto's responses."""
    query = {
        "TableName": "items",
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": "p0"}},
        "ReturnConsumedCapacity": "TOTAL",
    }
    out = [
        client.query(**query),
        client.query(**query, Limit=7, ScanIndexForward=False),
        client.query(**query, ProjectionExpression="sk, a0, a1"),
        client.query(**query, FilterExpression="attribute_exists(a2)", Select="COUNT"),
        client.query(**query, Limit=4, ExclusiveStartKey={"pk": {"S": "p0"}, "sk": {"S": "s21"}}),
        client.query(
            TableName="items",
            KeyConditionExpression="pk = :p AND sk BETWEEN :low AND :high",
            ExpressionAttributeValues={":p": {"S": "p1"}, ":low": {"S": "s2"}, ":high": {"S": "s4"}},
        ),
        client.query(
            TableName="items",
            KeyConditionExpression="pk = :p AND sk BETWEEN :low AND :high",
            ExpressionAttributeValues={":p": {"S": "p2"}, ":low": {"S": "s1"}, ":high": {"S": "s5"}},
            Limit=3,
            ExclusiveStartKey={"pk": {"S": "p2"}, "sk": {"S": "s14"}},
            ScanIndexForward=False,
        ),
        client.query(
            TableName="items",
            KeyConditionExpression="pk = :p AND sk > :low",
            ExpressionAttributeValues={":p": {"S": "p0"}, ":low": {"S": "s5"}},
        ),
        client.query(**{**query, "ExpressionAttributeValues": {":p": {"S": "absent"}}}),
        client.scan(TableName="items"),
        client.scan(TableName="items", Limit=5, ExclusiveStartKey={"pk": {"S": "p1"}, "sk": {"S": "s4"}}),
    ]
    for page in out:
        page.pop("ResponseMetadata")
    return [sets_sorted(page) for page in out]


def sets_sorted(value: Any) -> Any:
    """Sets (SS, NS, BS) in a fixed order: moto's own projection round trip may reorder them."""
    if isinstance(value, dict):
        return {k: sorted(v) if k in ("SS", "NS", "BS") else sets_sorted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [sets_sorted(v) for v in value]
    return value


@pytest.mark.parametrize("binary", [False, True], ids=["json-only", "with-binary"])
def test_the_item_serialisation_is_moto_s_serialisation(binary: bool) -> None:
    import boto3  # noqa: PLC0415
    from moto import mock_aws  # noqa: PLC0415

    # Given a table of items of every attribute type (binary ones too)
    rng = random.Random(11)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x")
        client.create_table(
            TableName="items",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        for n in range(60):
            item = {"pk": {"S": f"p{n % 3}"}, "sk": {"S": f"s{n}"}, **{f"a{k}": attribute(rng) for k in range(4)}}
            if binary and n % 5 == 0:
                item["b"] = {"B": bytes([n, 0, 255])}
                item["bs"] = {"BS": [b"x", bytes([n])]}
            client.put_item(TableName="items", Item=item)
        # When the same reads are answered by moto's serialiser and by the speed-up
        theirs = pages(client)
        assert moto_speedups.install()
        moto_serialised: list[str] = []  # the operations whose items moto's own serialiser wrote
        own = moto_speedups._PATCH.originals["execute_result"]

        def recorded(result: Any, context: Any) -> Any:
            if "Items" in result.result:
                moto_serialised.append(context.operation_model.name)
            return own(result, context)

        moto_speedups._PATCH.originals["execute_result"] = recorded
        try:
            ours = pages(client)
        finally:
            moto_speedups._PATCH.originals["execute_result"] = own  # what uninstall puts back on moto's class
            moto_speedups.uninstall()
        from moto.dynamodb.responses import DynamoResult  # noqa: PLC0415

        assert DynamoResult.execute_result is own
    # Then boto3 parses the same pages from both, and no page's items went through moto's serialiser
    assert ours == theirs
    assert moto_serialised == []
    assert sum(len(p.get("Items", [])) for p in ours) > 60


def shard(records: int) -> Any:
    from moto.kinesis.models import Shard  # noqa: PLC0415

    s = Shard(0, 0, 2**128)
    for n in range(records):
        s.put_record(f"k{n % 7}", base64.b64encode(f"data-{n}".encode()).decode(), "")
    return s


@pytest.mark.parametrize("size", [0, 1, 40])
def test_kinesis_shard_numbers_and_reads_are_moto_s(size: int) -> None:
    from moto.kinesis.models import Shard  # noqa: PLC0415

    # Given a shard filled by moto's own put_record, and one filled by the speed-up
    own = shard(size)
    moto_get = Shard.get_records
    assert moto_speedups.install()
    try:
        fast = shard(size)
        # When every read of moto's shard (from each position, with each limit or none) is answered by both
        for last in range(size + 2):
            for limit in (None, 0, 1, 3, size + 5):
                # Then the records, the next position and the lag are moto's
                assert Shard.get_records(own, str(last), limit) == moto_get(own, str(last), limit)
    finally:
        moto_speedups.uninstall()
    # and the speed-up numbered and stored the records as moto does
    assert [r.to_json()["Data"] for r in fast.records.values()] == [r.to_json()["Data"] for r in own.records.values()]
    assert list(fast.records) == list(own.records) == list(range(1, size + 1))


def test_a_shard_numbered_otherwise_is_read_by_moto_s_own_walk() -> None:
    from moto.kinesis.models import Shard  # noqa: PLC0415

    # Given a shard whose numbers are not 1, 2, 3... (a gap)
    s = shard(5)
    del s.records[3]
    assert moto_speedups.install()
    try:
        # When it is read with the speed-up; then the records are moto's: 2, 4, 5
        assert [r.sequence_number for r in Shard.get_records(s, "1", 10)[0]] == [2, 4, 5]
    finally:
        moto_speedups.uninstall()
