"""The query function under SnapStart: init registers the runtime hooks, the snapshot is taken after
one priming request, and a copy restored later, in a changed world, answers its first request as a
function that had just cold-started would: it reads the shard map and the cursor key again, signs
with the restored environment's credentials, over new connections."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from aws_lambda_powertools.metrics.provider.cold_start import reset_cold_start_flag
from botocore.client import BaseClient

from adapters.clients import client, reset_clients
from adapters.observability import metrics
from keydesign import format_ts
from tests.integration.mocked_aws import create_readings_table
from tests.integration.query.conftest import HOUR, NOW, PREFIX, Store, StoreFactory
from tests.unit.query.apigw import ApiClient, entity_path

pytestmark = pytest.mark.integration

CONTROL = "control"
ENV = {
    "LAYOUT": "hybrid",
    "SHARDS": "4",
    "BUCKET": "1h",
    "TABLE_PREFIX": PREFIX,
    "CONTROL_TABLE": CONTROL,
    "POWERTOOLS_SERVICE_NAME": "query",
    "MAX_RANGE": "2d",
}
KEY_BEFORE = "before-the-snapshot-" + "x" * 40
KEY_AFTER = "rotated-while-it-waited-" + "y" * 40
KEY_LATER = "rotated-after-the-restore-" + "z" * 40


class Calls:
    """Every AWS call the function makes (operation, and the table or key stage it names), and the access
    key each request was signed with."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str]] = []
        self.signed_with: list[str] = []
        self._watched: set[int] = set()

    def record(self, make_api_call: Callable[..., Any], made_by: BaseClient, operation: str, params: Any) -> Any:
        if id(made_by) not in self._watched:
            self._watched.add(id(made_by))
            made_by.meta.events.register_first("before-send", self._signed)
        self.made.append((operation, params.get("TableName") or params.get("VersionStage") or ""))
        return make_api_call(made_by, operation, params)

    def _signed(self, request: Any, **_: Any) -> None:
        self.signed_with.append(request.headers["Authorization"].decode().split("Credential=")[1].split("/")[0])

    def during(self, action: Callable[[], Any]) -> list[tuple[str, str]]:
        """The calls ``action`` made, sorted, reads of the readings tables counted once: how many Query
        calls a page makes depends on its threads' timing (the merge reads ahead)."""
        start = len(self.made)
        action()
        made = self.made[start:]
        assert ("Query", PREFIX) in made
        return [*sorted(call for call in made if call != ("Query", PREFIX)), ("Query", PREFIX)]


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    recorder = Calls()
    original = BaseClient._make_api_call
    monkeypatch.setattr(
        BaseClient, "_make_api_call", lambda self, op, params: recorder.record(original, self, op, params)
    )
    return recorder


@pytest.fixture
def store(make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch) -> Store:
    made = make_store("hybrid")
    create_readings_table(made.dynamodb, CONTROL)
    made.write_series("sensor-1", 12, 600_000)
    secret = client("secretsmanager").create_secret(Name="query/cursor-key", SecretString=KEY_BEFORE)
    for name, value in {**ENV, "CURSOR_SECRET_ARN": secret["ARN"]}.items():
        monkeypatch.setenv(name, value)
    return made


@pytest.fixture
def fresh_handler() -> Iterator[Callable[[], ModuleType]]:
    def init() -> ModuleType:
        """A new process's init: its own clients, and Powertools' cold-start flag up again."""
        sys.modules.pop("query.handler", None)
        reset_clients()
        metrics.clear_metrics()
        reset_cold_start_flag()
        return importlib.import_module("query.handler")

    yield init
    sys.modules.pop("query.handler", None)
    metrics.clear_metrics()


def first_page(api: ApiClient) -> dict[str, Any]:
    reply = api.get(entity_path("sensor-1", "readings"), from_=format_ts(NOW - 4 * HOUR), to=format_ts(NOW), limit=5)
    assert reply.status == 200, reply.body
    return dict(reply.body)


@pytest.mark.usefixtures("store")
def test_a_restored_copys_first_request_is_a_cold_starts_though_the_snapshot_was_primed(
    calls: Calls,
    lambda_runtime: dict[str, list[Callable[[], None]]],
    fresh_handler: Callable[[], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # What a cold start's first request does, and a warm one's (a function with no snapshot)
    cold = ApiClient(fresh_handler().handler)
    cold_first, warm = calls.during(lambda: first_page(cold)), calls.during(lambda: first_page(cold))
    assert ("GetSecretValue", "AWSCURRENT") in cold_first and ("GetSecretValue", "AWSCURRENT") not in warm
    assert ("GetItem", CONTROL) in cold_first and ("GetItem", CONTROL) not in warm  # the shard map
    lambda_runtime["before"].clear(), lambda_runtime["after"].clear()

    # Given init, and the hooks it registered with Lambda's runtime
    module = fresh_handler()
    assert [len(hooks) for hooks in lambda_runtime.values()] == [1, 1]
    # When the snapshot is taken: priming reads the shard map, the key and the readings tables
    primed = calls.during(lambda: [hook() for hook in reversed(lambda_runtime["before"])])
    assert {("GetItem", CONTROL), ("GetSecretValue", "AWSCURRENT"), ("Query", PREFIX)} <= set(primed)
    # And while the snapshot waits the world moves on: the key rotates, the environment's credentials change
    client("secretsmanager").put_secret_value(SecretId="query/cursor-key", SecretString=KEY_AFTER)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIARESTOREDCOPY")
    calls.signed_with.clear()
    for hook in lambda_runtime["after"]:
        hook()
    restored = ApiClient(module.handler)
    body: dict[str, Any] = {}

    def first() -> None:
        body.update(first_page(restored))

    capsys.readouterr()
    restored_first = calls.during(first)
    # Then its first request makes a cold start's calls, not a warm one's
    assert restored_first == cold_first
    # and is counted as a cold start, with its own metrics only (the priming request's were dropped)
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    assert sorted(name for blob in emitted for name in ("ColdStart", "QueryCalls") if name in blob) == [
        "ColdStart",
        "QueryCalls",
    ]
    assert [len(blob["QueryCalls"]) for blob in emitted if "QueryCalls" in blob] == [1]
    # signed with the restored environment's credentials
    assert set(calls.signed_with) == {"AKIARESTOREDCOPY"}
    # And its next request is a warm one
    assert calls.during(lambda: first_page(restored)) == warm == [("Query", PREFIX)]
    # Its cursor was signed with the key rotated in while the snapshot waited: after one more rotation
    # that key is the previous one, still accepted, where the key before the snapshot is not
    client("secretsmanager").put_secret_value(SecretId="query/cursor-key", SecretString=KEY_LATER)
    later = ApiClient(fresh_handler().handler)
    reply = later.get(
        entity_path("sensor-1", "readings"),
        from_=format_ts(NOW - 4 * HOUR),
        to=format_ts(NOW),
        limit=5,
        cursor=body["next_cursor"],
    )
    assert reply.status == 200, reply.body
    assert [i["event_id"] for i in reply.body["items"]] == [f"e{n:02d}" for n in range(5, 10)]
