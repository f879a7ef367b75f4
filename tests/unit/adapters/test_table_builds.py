"""Asking the rotator for missing tables: once per table per container lately, chunked, best effort."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from adapters.table_builds import ASK_EVERY_MS, TABLES_PER_REQUEST, TableBuilds
from doubles.clocks import ManualClock
from rotator.request import RotationRequest


class FakeLambda:
    def __init__(self, *, failing: int = 0) -> None:
        self.failing = failing
        self.payloads: list[dict[str, Any]] = []

    def invoke(self, **kwargs: Any) -> dict[str, Any]:
        assert (kwargs["FunctionName"], kwargs["InvocationType"]) == ("rotator", "Event")
        if self.failing:
            self.failing -= 1
            raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "t"}}, "Invoke")
        self.payloads.append(json.loads(kwargs["Payload"]))
        return {"StatusCode": 202}


def test_each_table_is_asked_for_once_lately_and_the_request_is_one_the_rotator_accepts() -> None:
    api, clock = FakeLambda(), ManualClock(100.0)
    builds = TableBuilds(api, "rotator", clock=clock)
    assert builds.request(["t-2", "t-1", "t-2"]) == ["t-1", "t-2"]
    assert builds.request(["t-1", "t-3"]) == ["t-3"]  # t-1 asked a moment ago
    clock.now += ASK_EVERY_MS / 1000
    assert builds.request(["t-1"]) == ["t-1"]
    assert api.payloads == [{"build": ["t-1", "t-2"]}, {"build": ["t-3"]}, {"build": ["t-1"]}]
    request = RotationRequest.from_event(api.payloads[0], dry_run_default=False, allow_now_override=False)
    assert request.build == ("t-1", "t-2") and not request.dry_run


def test_many_tables_go_in_requests_of_at_most_the_rotators_limit() -> None:
    api = FakeLambda()
    names = [f"t-{n:03}" for n in range(TABLES_PER_REQUEST * 2 + 1)]
    assert TableBuilds(api, "rotator", clock=ManualClock(100.0)).request(names) == names
    assert [len(p["build"]) for p in api.payloads] == [TABLES_PER_REQUEST, TABLES_PER_REQUEST, 1]


def test_a_failed_ask_is_forgotten_so_the_redelivery_asks_again() -> None:
    api = FakeLambda(failing=1)
    builds = TableBuilds(api, "rotator", clock=ManualClock(100.0))
    assert builds.request(["t-1"]) == []
    assert builds.request(["t-1"]) == ["t-1"]
    assert api.payloads == [{"build": ["t-1"]}]
