"""The cursor key rotates: Secrets Manager's RotateSecret (moto) runs the rotation function's four steps,
and the query API, reading the key's staging labels through the real adapter, signs with AWSCURRENT and
accepts AWSCURRENT and AWSPREVIOUS."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.awslambda.models import LambdaBackend

from adapters.partition_reader import DynamoPartitionReader
from adapters.secret_versions import read_secret
from adapters.shard_map_source import StaticShardMap
from doubles.lambda_context import FakeLambdaContext
from query.api import create_app
from query.cursor import CursorCodec, CursorKeys
from query.logic import QueryService
from query.settings import CursorSecretSource, QueryLimits
from tests.integration.iam_conformance import assert_conforms, recording
from tests.integration.query.conftest import NOW, REGION, Store, StoreFactory
from tests.integration.query.test_cursors import FROM, PATH, TO, assert_cursor_refused, first_cursor
from tests.unit.query.apigw import ApiClient

pytestmark = pytest.mark.integration

#: A TTL long enough that nothing expires during a test: fresh containers stand for expired caches.
TTL_MS = 3_600_000


@pytest.fixture
def rotate(dynamodb: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """RotateSecret with the rotation function: moto stages AWSPENDING and invokes each step, which
    runs here, in-process, through the function's own handler (moto cannot run Lambda code without Docker)."""
    from cursor_rotation import handler  # noqa: PLC0415 - imported inside moto, where its clients are made

    steps: list[str] = []

    def invoke(self: Any, function_name: str, qualifier: Any, body: str, *args: Any, **kwargs: Any) -> bytes:
        event = json.loads(body)
        steps.append(event["Step"])
        handler.handler(event, FakeLambdaContext(function_name="cursor-rotation", memory_limit_in_mb=256))
        return b""

    monkeypatch.setattr(LambdaBackend, "invoke", invoke)
    role = boto3.client("iam", region_name=REGION).create_role(RoleName="rotation", AssumeRolePolicyDocument="{}")
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("handler.py", "")
    function = boto3.client("lambda", region_name=REGION).create_function(
        FunctionName="cursor-rotation",
        Runtime="python3.12",
        Role=role["Role"]["Arn"],
        Handler="cursor_rotation.handler.handler",
        Code={"ZipFile": code.getvalue()},
    )

    def run(secret_arn: str) -> None:
        steps.clear()
        boto3.client("secretsmanager", region_name=REGION).rotate_secret(
            SecretId=secret_arn,
            RotationLambdaARN=function["FunctionArn"],
            RotationRules={"AutomaticallyAfterDays": 30},
        )
        assert steps == ["createSecret", "setSecret", "testSecret", "finishSecret"]

    return run


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    made = make_store("hybrid")
    made.write_series("sensor-1", 20, 300_000)
    return made


@pytest.fixture
def secret_arn(dynamodb: Any) -> str:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    return str(secrets.create_secret(Name="cursor-key", SecretString="first-key-" + "x" * 54)["ARN"])


def container(store: Store, secret_arn: str) -> ApiClient:
    """A fresh query function instance: the API over the store, its keys read from the secret."""
    keys = CursorKeys.from_source(CursorSecretSource(secret_id=secret_arn, literal=None, ttl_ms=TTL_MS), read_secret)
    service = QueryService(
        layout=store.layout,
        shard_maps=StaticShardMap(store.shard_map),
        reader=DynamoPartitionReader(store.dynamodb),
        cursors=CursorCodec(keys),
        limits=QueryLimits(),
        clock_ms=lambda: NOW,
    )
    return ApiClient(create_app(service).resolve)


def test_the_rotation_function_stages_a_new_random_key(
    store: Store, secret_arn: str, rotate: Callable[[str], None]
) -> None:
    secrets = boto3.client("secretsmanager", region_name=REGION)
    rotate(secret_arn)
    current = secrets.get_secret_value(SecretId=secret_arn)["SecretString"]
    previous = secrets.get_secret_value(SecretId=secret_arn, VersionStage="AWSPREVIOUS")["SecretString"]
    assert previous == "first-key-" + "x" * 54
    assert len(current) == 64 and current.isalnum() and current != previous
    # And no version is left AWSPENDING, so the next rotation can start
    stages = secrets.describe_secret(SecretId=secret_arn)["VersionIdsToStages"]
    assert not any("AWSPENDING" in labels for labels in stages.values())


def test_a_cursor_from_before_one_rotation_still_pages_on(
    store: Store, secret_arn: str, rotate: Callable[[str], None]
) -> None:
    cursor = first_cursor(container(store, secret_arn))
    rotate(secret_arn)

    reply = container(store, secret_arn).get(PATH, from_=FROM, to=TO, limit=5, cursor=cursor)

    assert reply.status == 200, reply.body
    assert [item["event_id"] for item in reply.body["items"]] == ["e05", "e06", "e07", "e08", "e09"]


def test_a_cursor_from_two_rotations_ago_is_the_usual_400(
    store: Store, secret_arn: str, rotate: Callable[[str], None]
) -> None:
    cursor = first_cursor(container(store, secret_arn))
    rotate(secret_arn)
    rotate(secret_arn)

    assert_cursor_refused(container(store, secret_arn), cursor, "rotated out")


def test_a_warm_container_accepts_cursors_signed_after_a_rotation_it_has_not_seen(
    store: Store, secret_arn: str, rotate: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a warm container that read the first key more than the miss interval ago
    warm = container(store, secret_arn)
    first_cursor(warm)
    monkeypatch.setattr("query.cursor.MISS_REFRESH_MS", 0)
    # When the key rotates and a fresh container signs a cursor with the new one
    rotate(secret_arn)
    cursor = first_cursor(container(store, secret_arn))
    # Then the warm one, inside its TTL, fetches the keys again and pages on
    reply = warm.get(PATH, from_=FROM, to=TO, limit=5, cursor=cursor)
    assert reply.status == 200, reply.body


def test_every_call_the_rotation_function_makes_is_granted_to_its_role(
    secret_arn: str, rotate: Callable[[str], None]
) -> None:
    # IAM conformance (tests/integration/iam_conformance.py): two rotations, all four steps each
    with recording("cursor_rotation") as called:
        rotate(secret_arn)
        rotate(secret_arn)
    assert_conforms(
        "cursor_rotation",
        called,
        not_called={},
    )


def test_the_reader_returns_text_or_binary_as_bytes_and_none_for_a_label_no_version_carries(dynamodb: Any) -> None:
    # Given a text secret never rotated and a binary one, read with one GetSecretValue each
    secrets = boto3.client("secretsmanager", region_name=REGION)
    text = secrets.create_secret(Name="text-key", SecretString="k\u00e9y")["ARN"]
    binary = secrets.create_secret(Name="binary-key", SecretBinary=b"\x00\xffkey")["ARN"]
    # Then both come back as bytes, and AWSPREVIOUS, which no version carries yet, as None
    assert read_secret(text) == "k\u00e9y".encode()
    assert read_secret(binary) == b"\x00\xffkey"
    assert read_secret(text, "AWSPREVIOUS") is None
    # But a missing AWSCURRENT (no such secret) is an error, not None
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        read_secret("no-such-secret")
