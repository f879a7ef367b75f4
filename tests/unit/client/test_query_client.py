"""The query client without a server: signing, retries, errors, typed results (a recording transport)."""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from client import ApiError, QueryClient, format_time
from client.api_client import MAX_RETRY_AFTER_S, Response
from keydesign.timefmt import from_datetime, parse_instant


def page(items: list[str], cursor: str | None) -> dict[str, Any]:
    return {
        "entity_id": "s-1",
        "from": "a",
        "to": "b",
        "order": "asc",
        "ordering": "time",
        "count": len(items),
        "items": [
            {"entity_id": "s-1", "event_id": e, "timestamp": "2026-11-22T06:00:00.000Z", "measures": {"t": 1}}
            for e in items
        ],
        "next_cursor": cursor,
        "cost": {"partitions_planned": 2, "partitions_queried": 1, "queries": 1, "items_read": 3, "read_units": 0.5},
    }


class Recorder:
    """A transport answering from a list of responses, recording every request."""

    def __init__(self, *answers: Response) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[str, dict[str, str]]] = []

    def __call__(self, method: str, url: str, headers: Mapping[str, str], timeout_s: float) -> Response:
        self.requests.append((url, dict(headers)))
        return self.answers.pop(0)


def ok(body: dict[str, Any]) -> Response:
    return Response(200, {}, json.dumps(body).encode())


def test_pages_are_followed_with_the_cursor_and_cost_adds_up() -> None:
    transport = Recorder(ok(page(["a", "b"], "C1")), ok(page(["c"], None)))
    client = QueryClient("http://127.0.0.1:9/v1", transport=transport)
    stream = client.readings("plant 7/a", 1_700_000_000_000, "2026-11-22T07:00:00Z", limit=2)
    assert [r.event_id for r in stream] == ["a", "b", "c"]
    assert stream.pages == 2 and stream.cost.read_units == 1.0 and stream.cost.queries == 2
    first, second = (urlsplit(url) for url, _ in transport.requests)
    assert first.path == "/v1/entities/plant%207%2Fa/readings"
    assert parse_qs(first.query) == {"from": ["1700000000000"], "to": ["2026-11-22T07:00:00Z"], "limit": ["2"]}
    assert parse_qs(second.query)["cursor"] == ["C1"]
    assert "Authorization" not in transport.requests[0][1]  # loopback: not signed


def test_a_deployed_api_is_signed_for_execute_api_in_its_region() -> None:
    transport = Recorder(ok({"entity_id": "s-1", "reading": None, "cost": {}}))
    client = QueryClient(
        "https://abc123.execute-api.eu-west-1.amazonaws.com/v1",
        transport=transport,
        credentials=Credentials("AKIDEXAMPLE", "secret", "token"),
    )
    assert client.latest("s-1", lookback="6h").reading is None
    headers = transport.requests[0][1]
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in headers["Authorization"]
    assert headers["X-Amz-Security-Token"] == "token" and "X-Amz-Date" in headers


def test_503_and_429_are_retried_honouring_retry_after_then_give_up() -> None:
    busy = Response(503, {"retry-after": "2"}, b'{"error": "the store is busy", "parameter": null}')
    slow = Response(429, {"retry-after": "999"}, b'{"message": "Too Many Requests"}')
    slept: list[float] = []
    client = QueryClient(
        "http://127.0.0.1:9/v1",
        transport=Recorder(busy, slow, ok({"entity_id": "s", "reading": None})),
        sleep=slept.append,
        rng=random.Random(1),
    )
    assert client.latest("s").reading is None
    assert slept[0] >= 2.0 and slept[1] == MAX_RETRY_AFTER_S and client.retries == 2
    gives_up = QueryClient("http://127.0.0.1:9/v1", transport=Recorder(busy, busy), max_attempts=2, sleep=slept.append)
    with pytest.raises(ApiError) as exc:
        gives_up.latest("s")
    assert (exc.value.status, exc.value.attempts, exc.value.error) == (503, 2, "the store is busy")


def test_a_400_is_not_retried_and_names_the_parameter() -> None:
    refused = Response(
        400, {"x-amzn-requestid": "r-1"}, b'{"error": "interval: is not a duration", "parameter": "interval"}'
    )
    client = QueryClient("http://127.0.0.1:9/v1", transport=Recorder(refused), sleep=lambda s: None)
    with pytest.raises(ApiError) as exc:
        client.aggregates("s", "a", "b", "fortnight")
    assert (exc.value.status, exc.value.parameter, exc.value.request_id) == (400, "interval", "r-1")
    assert str(exc.value) == "HTTP 400 (parameter interval): interval: is not a duration"


def test_gateway_answers_without_the_error_shape_and_broken_connections() -> None:
    denied = Response(403, {}, b'{"message": "Missing Authentication Token"}')
    with pytest.raises(ApiError, match="Missing Authentication Token"):
        QueryClient("http://127.0.0.1:9/v1", transport=Recorder(denied)).latest("s")

    def refuse(*args: Any) -> Response:
        raise ConnectionRefusedError("refused")

    slept: list[float] = []
    client = QueryClient("http://127.0.0.1:9/v1", transport=refuse, max_attempts=3, sleep=slept.append)
    with pytest.raises(ApiError) as exc:
        client.latest("s")
    assert exc.value.status == 0 and exc.value.attempts == 3 and len(slept) == 2
    with pytest.raises(ApiError, match="no 'items' field"):
        list(QueryClient("http://127.0.0.1:9/v1", transport=Recorder(ok({"x": 1}))).readings("s", "a", "b"))


def test_explain_builds_each_routes_request() -> None:
    plan = {"route": "range_readings", "partition_count": 3, "tables": ["t"], "estimated_read_units": 2.5}
    transport = Recorder(*(ok(plan) for _ in range(4)))
    client = QueryClient("http://127.0.0.1:9/v1", transport=transport)
    assert client.explain("range", from_="a", to="b").partition_count == 3
    client.explain("readings", entity_id="s", from_="a", to="b", order="desc")
    client.explain("latest", entity_id="s", lookback="1h")
    client.explain("aggregates", entity_id="s", from_="a", to="b", interval="1h")
    paths = [urlsplit(url).path for url, _ in transport.requests]
    assert paths == ["/v1/readings", "/v1/entities/s/readings", "/v1/entities/s/latest", "/v1/entities/s/aggregates"]
    assert all("explain=true" in url for url, _ in transport.requests)
    with pytest.raises(ValueError, match="needs entity_id"):
        client.explain("latest")
    with pytest.raises(TypeError, match="limitt"):
        client.explain("range", from_="a", to="b", limitt=3)


def test_times_and_urls() -> None:
    assert format_time(datetime(2026, 11, 22, 7, 0, tzinfo=timezone(timedelta(hours=1)))) == "2026-11-22T06:00:00.000Z"
    assert format_time(datetime(2026, 11, 22, tzinfo=UTC)) == "2026-11-22T00:00:00.000Z"
    with pytest.raises(ValueError, match="time zone"):
        format_time(datetime(2026, 11, 22))
    with pytest.raises(ValueError, match="not an http"):
        QueryClient("abc123.execute-api.eu-west-1.amazonaws.com")


def test_aggregate_rows_and_a_missing_pandas(monkeypatch: pytest.MonkeyPatch) -> None:
    body = {
        "entity_id": "s",
        "interval": "1h",
        "stats": ["count", "avg"],
        "intervals": [{"start": "T0", "readings": 2, "measures": {"t": {"count": 2, "avg": 1.5}, "rh": {"count": 1}}}],
        "readings": 2,
    }
    series = QueryClient("http://127.0.0.1:9/v1", transport=Recorder(ok(body))).aggregates("s", "a", "b", "1h")
    assert series.intervals[0].set_aside is None
    assert series.rows() == [
        {"start": "T0", "measure": "rh", "readings": 2, "count": 1},
        {"start": "T0", "measure": "t", "readings": 2, "count": 2, "avg": 1.5},
    ]
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ModuleNotFoundError, match="pip install pandas"):
        series.to_dataframe()


def test_a_custom_domain_needs_a_region_to_sign_with(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    with pytest.raises(ValueError, match="region"):
        QueryClient("https://readings.example.com/v1")
    assert QueryClient("https://readings.example.com/v1", region="eu-west-1").api_url.endswith("/v1")


def test_an_interval_set_aside_by_the_rollups_says_why() -> None:
    interval = {"start": "T0", "readings": 1, "measures": {}, "set_aside": "the item 'p' / 's' is not a block"}
    body = {"entity_id": "s", "interval": "1m", "stats": ["count"], "intervals": [interval], "readings": 1}
    series = QueryClient("http://127.0.0.1:9/v1", transport=Recorder(ok(body))).aggregates("s", "a", "b", "1m")
    assert series.intervals[0].set_aside == "the item 'p' / 's' is not a block"


def test_a_dropped_connection_and_503s_are_retried_on_the_injected_sleep_then_the_last_answer_is_raised() -> None:
    # Given an API that drops the first connection, then answers 503 (a Retry-After it cannot read: an HTTP date)
    busy = Response(503, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, b'{"error": "the store is busy"}')
    answers: list[Response | OSError] = [ConnectionResetError("reset"), busy, busy]

    def transport(*args: Any) -> Response:
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    slept: list[float] = []
    client = QueryClient(
        "http://127.0.0.1:9/v1", transport=transport, max_attempts=3, sleep=slept.append, rng=random.Random(1)
    )
    # When a read runs out of attempts
    with pytest.raises(ApiError) as exc:
        client.latest("s")
    # Then it was tried 3 times, with a full-jitter backoff (under 200 ms, then 400 ms) on the injected sleep
    # before each retry and none after the last, and the last answer is what is raised
    assert (client.requests, client.retries, len(slept)) == (3, 2, 2) and not answers
    assert 0 < slept[0] <= 0.2 and 0 < slept[1] <= 0.4
    assert (exc.value.status, exc.value.attempts, exc.value.error) == (503, 3, "the store is busy")

    # And a connection refused every time raises "no answer", caused by the last refusal
    def refuse(*args: Any) -> Response:
        raise ConnectionRefusedError("refused")

    with pytest.raises(ApiError, match=r"^no answer from http://127\.0\.0\.1:9/v1: refused after 2 attempts$") as exc:
        QueryClient("http://127.0.0.1:9/v1", transport=refuse, max_attempts=2, sleep=slept.append).latest("s")
    assert isinstance(exc.value.__cause__, ConnectionRefusedError) and exc.value.attempts == 2


@settings(max_examples=200, deadline=None)
@given(
    moment=st.datetimes(datetime(1970, 1, 2), datetime(9999, 12, 30), timezones=st.just(UTC))
    | st.datetimes(datetime(1970, 1, 2), datetime(9999, 12, 30)).map(
        lambda d: d.replace(tzinfo=timezone(timedelta(hours=-5, minutes=-30)))
    )
)
def test_a_datetime_is_sent_as_keydesign_writes_times_and_read_back_to_its_millisecond(moment: datetime) -> None:
    text = format_time(moment)
    assert text == moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert parse_instant(text, "from") == from_datetime(moment)


def test_a_datetime_the_api_cannot_take_is_refused_before_it_is_sent() -> None:
    with pytest.raises(ValueError, match="outside the supported range"):
        format_time(datetime(1969, 12, 31, 23, 59, 59, 999_000, tzinfo=UTC))
    with pytest.raises(ValueError, match="outside the supported range"):
        format_time(datetime(9999, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-1))))
