"""The control table's batch reads: keys BatchGetItem hands back unprocessed are asked again after a
backoff on the injected sleep (no real sleep), and a table that keeps refusing is reported, not skipped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from hotkeys.control_table import DONE, ControlTable, ControlTableBusy
from keydesign import format_ts
from tests.unit.adapters.conftest import ThrottledBatchGets

TABLE = "control"
WIDTH_MS = 60_000
STARTS = [1_795_000_000_000 + i * WIDTH_MS for i in range(3)]


def _judged_windows() -> list[dict[str, Any]]:
    """Each window of STARTS judged with writes counted, its one page naming ``sensor-<i>``."""
    items: list[dict[str, Any]] = []
    for i, start in enumerate(STARTS):
        pk = {"S": f"close#{format_ts(start)}"}
        items.append(
            {"pk": pk, "sk": {"S": "window"}, "state": {"S": DONE}, "observed": {"BOOL": True}, "pages": {"N": "1"}}
        )
        items.append({"pk": pk, "sk": {"S": "entities#000"}, "load": {"S": json.dumps({f"sensor-{i}": 10 + i})}})
    return items


@pytest.fixture
def sleeps() -> list[float]:
    return []


@pytest.fixture
def table_of(sleeps: list[float]) -> Iterator[Any]:
    made: list[ControlTable] = []

    def make(api: ThrottledBatchGets) -> ControlTable:
        made.append(ControlTable(api, TABLE, sleep=sleeps.append))  # type: ignore[arg-type]  # only batch_get_item
        return made[-1]

    yield make
    for table in made:
        table.close()


def test_unprocessed_keys_are_asked_again_after_backoff_on_the_injected_sleep(
    table_of: Any, sleeps: list[float]
) -> None:
    # Given a table that reads one key a call and hands the others back unprocessed
    api = ThrottledBatchGets(TABLE, _judged_windows(), consistent=True, per_call=1)
    # When the history of three judged windows is read (3 claims, then 3 pages)
    history = table_of(api).read_history(STARTS, WIDTH_MS)
    # Then only the unprocessed keys were asked again, each retry after a full-jitter backoff on the
    # injected sleep (under 50 ms, then 100 ms), and every window's page was read
    assert api.asked == [3, 2, 1, 3, 2, 1]
    assert len(sleeps) == 4 and all(0 <= s <= bound for s, bound in zip(sleeps, [0.05, 0.1, 0.05, 0.1], strict=True))
    assert sorted(history) == STARTS
    assert [{e: v.wcu for e, v in history[s].entities.items()} for s in STARTS] == [
        {"sensor-0": 10},
        {"sensor-1": 11},
        {"sensor-2": 12},
    ]


def test_keys_left_unprocessed_after_every_attempt_are_reported_busy_not_skipped(
    table_of: Any, sleeps: list[float]
) -> None:
    # Given a table so throttled it reads no key at all
    api = ThrottledBatchGets(TABLE, _judged_windows(), consistent=True, per_call=0)
    # When the history is read, it fails naming the keys left, rather than answer without them
    with pytest.raises(ControlTableBusy, match=r"^3 key\(s\) stayed unprocessed after 6 tries$"):
        table_of(api).read_history(STARTS, WIDTH_MS)
    # After 6 calls with a doubling full-jitter backoff between them (none after the last), on the injected sleep
    assert api.asked == [3] * 6
    assert len(sleeps) == 5 and all(0 <= s <= 0.05 * 2**i for i, s in enumerate(sleeps))
