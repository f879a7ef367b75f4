"""Cursors through the API: tampered, truncated, foreign and forged cursors are a 400 naming ``cursor``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from keydesign import format_ts
from tests.integration.query.conftest import HOUR, NOW, Store, api_for, reading, shared_store
from tests.unit.query.apigw import ApiClient, entity_path

pytestmark = pytest.mark.integration

FROM, TO = format_ts(NOW - 4 * HOUR), format_ts(NOW)
PATH = entity_path("sensor-1", "readings")


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    """One for the whole module: its tests only read it."""
    with shared_store() as made:
        for n in range(30):
            made.write(reading("sensor-1", NOW - 3 * HOUR + n * 300_000, f"e{n:02d}"))
            made.write(reading("sensor-2", NOW - 3 * HOUR + n * 300_000, f"e{n:02d}"))
        yield made


def first_cursor(api: ApiClient, path: str = PATH, **params: Any) -> str:
    query: dict[str, Any] = {"from_": FROM, "to": TO, "limit": 5, **params}
    reply = api.get(path, **query)
    assert reply.status == 200, reply.body
    cursor = reply.body["next_cursor"]
    assert isinstance(cursor, str)
    return cursor


def assert_cursor_refused(api: ApiClient, cursor: str, match: str, path: str = PATH, **params: Any) -> None:
    query: dict[str, Any] = {"from_": FROM, "to": TO, "limit": 5, **params, "cursor": cursor}
    reply = api.get(path, **query)
    assert reply.status == 400, reply.body
    assert reply.body["parameter"] == "cursor"
    assert match in reply.body["error"]


def test_the_same_cursor_gives_the_same_page_and_tolerates_a_new_limit_or_consistency(store: Store) -> None:
    api = api_for(store)
    cursor = first_cursor(api)

    once = api.get(PATH, from_=FROM, to=TO, limit=5, cursor=cursor)
    again = api.get(PATH, from_=FROM, to=TO, limit=5, cursor=cursor)
    wider = api.get(PATH, from_=FROM, to=TO, limit=8, cursor=cursor, consistent=True)

    assert once.body["items"] == again.body["items"]
    assert wider.body["items"][:5] == once.body["items"]
    assert once.body["items"][0]["event_id"] == "e05"


@pytest.mark.parametrize("position", [2, 10, 30, 60, -3, -1])
def test_a_tampered_cursor_is_refused(store: Store, position: int) -> None:
    api = api_for(store)
    cursor = first_cursor(api)
    index = position % len(cursor)
    flipped = "B" if cursor[index] != "B" else "C"
    tampered = cursor[:index] + flipped + cursor[index + 1 :]

    # (the last character may only carry padding bits: the cursor must still be refused)
    assert_cursor_refused(api, tampered, "altered" if position != -1 else "")


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.95])
def test_a_truncated_cursor_is_refused(store: Store, keep: float) -> None:
    api = api_for(store)
    cursor = first_cursor(api)

    assert_cursor_refused(api, cursor[: int(len(cursor) * keep)], "truncated")


@pytest.mark.parametrize(
    ("change", "value"),
    [("from_", format_ts(NOW - 5 * HOUR)), ("to", format_ts(NOW - 1)), ("order", "desc"), ("measures", "v")],
)
def test_a_cursor_replayed_with_other_parameters_is_refused(store: Store, change: str, value: str) -> None:
    api = api_for(store)
    cursor = first_cursor(api)

    assert_cursor_refused(api, cursor, "different query", **{change: value})


def test_a_cursor_of_another_entity_is_refused(store: Store) -> None:
    api = api_for(store)
    cursor = first_cursor(api, entity_path("sensor-2", "readings"))

    assert_cursor_refused(api, cursor, "different query")


def test_a_cursor_of_another_route_is_refused(store: Store) -> None:
    api = api_for(store)
    cursor = first_cursor(api, "/readings")

    assert_cursor_refused(api, cursor, "different query")


def test_a_cursor_signed_by_another_deployment_is_refused(store: Store) -> None:
    other = api_for(store, key=b"another-deployment-key-0123456789abcdef")
    cursor = first_cursor(other)

    assert_cursor_refused(api_for(store), cursor, "altered")


@pytest.mark.parametrize(
    "cursor",
    ["garbage!", "' OR '1'='1", "eyJhIjoiMjAyNiJ9", "\u00e9t\u00e9", "A" * 2000, " ", "null"],
)
def test_garbage_cursors_are_refused(store: Store, cursor: str) -> None:
    reply = api_for(store).get(PATH, from_=FROM, to=TO, cursor=cursor)

    assert reply.status == 400
    assert reply.body["parameter"] == "cursor"
