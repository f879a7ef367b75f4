"""A first rollup run starts at the deployment's first marks, not LATENESS (MAX_AGE, days) back; and a
late reading's mark is applied up to MAX_AGE, on moto."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from adapters.batch_writer import BatchWriter
from adapters.retry import Deadline
from adapters.rollup_store import MarkRecorder, ReadCount, RollupStore, start_pk
from keydesign.rollup import MARK_SHARDS, SLOT_MS, floor_to
from rollup.logic import RollupRunner
from rollup.settings import RollupSettings
from tests.integration.mocked_aws import create_readings_table, mocked_aws

pytestmark = pytest.mark.integration

REGION = "eu-west-1"
MINUTE = 60_000
DAY = 86_400_000
NOW = 1_795_000_000_000 - 1_795_000_000_000 % 3_600_000 + 30 * MINUTE
ENV = {
    "SHARDS": "4",
    "TABLE_PREFIX": "readings",
    "CONTROL_TABLE": "control",
    "ROLLUPS": "1m,1h,1d",
    "RETENTION": "30d",
    "MAX_AGE": "3d",
}


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    with mocked_aws(monkeypatch, REGION):
        db = boto3.client("dynamodb", region_name=REGION)
        create_readings_table(db, "control")
        create_readings_table(db, "readings")
        yield db


def runner(clock: list[int]) -> RollupRunner:
    return RollupRunner.from_settings(RollupSettings.from_env(ENV), clock_ms=lambda: clock[0])


def container(dynamodb: Any) -> MarkRecorder:
    """An ingest container's mark recorder (its own, as each container has)."""
    store = RollupStore(dynamodb, BatchWriter(dynamodb, concurrency=1), "control", "readings", 30 * DAY)
    return MarkRecorder(store, MINUTE)


def mark(recorder: MarkRecorder, stamp: int, *readings: tuple[str, int]) -> None:
    assert recorder.write([(n, e, ts) for n, (e, ts) in enumerate(readings)], stamp, Deadline.never()) == {}


def test_a_new_deployments_first_run_starts_at_its_first_marks(dynamodb: Any) -> None:
    # Given a deployment whose ingest containers wrote their first marks 25 and 10 minutes ago
    mark(container(dynamodb), NOW - 10 * MINUTE, ("s-1", NOW - 10 * MINUTE))
    mark(container(dynamodb), NOW - 25 * MINUTE, ("s-2", NOW - 25 * MINUTE))
    clock = [NOW]
    # When the rollup function runs for the first time
    report = runner(clock).run(Deadline.never())
    # Then it starts at the earliest of them and applies both, working through 22 minutes of marks
    # (to 3 minutes ago, SETTLE), not the 4,320 of MAX_AGE
    first = floor_to(NOW - 25 * MINUTE, SLOT_MS)
    assert report.slots == (floor_to(NOW - 3 * MINUTE, SLOT_MS) - first) // SLOT_MS == 22
    assert report.marks == 2 and report.recomputed[MINUTE] == 2 and report.late == 0
    # a Query per mark key of the 2 marked minutes and per rollup key of their totals, and one or two for the
    # marked-minutes index (an hour each): every mark key of the 22 minutes would be 704, of 4,320 138,240
    assert report.rollups.calls <= 2 * MARK_SHARDS + 2 * MARK_SHARDS + 2 < 22 * MARK_SHARDS


def test_a_first_run_before_any_mark_starts_now_and_misses_none_written_after(dynamodb: Any) -> None:
    clock = [NOW]
    rollup = runner(clock)
    # Given a first run before ingest has marked anything
    first = rollup.run(Deadline.never())
    assert first.slots == 0 and first.through_ms == floor_to(NOW - 3 * MINUTE, SLOT_MS)
    # When a container then writes marks stamped a moment ago (its batch started before the run read)
    mark(container(dynamodb), NOW - 2 * MINUTE, ("s-1", NOW - 2 * MINUTE))
    clock[0] = NOW + 5 * MINUTE
    # Then the next run applies them (the watermark was saved where the first run started)
    assert rollup.run(Deadline.never()).marks == 1


def test_a_mark_up_to_max_age_late_is_applied_and_an_older_one_counted(dynamodb: Any) -> None:
    # Given a store-and-forward device's readings 2 days old, and a clock 4 days behind, stamped now
    mark(container(dynamodb), NOW, ("s-1", NOW - 2 * DAY), ("s-2", NOW - 4 * DAY))
    clock = [NOW + 5 * MINUTE]
    report = runner(clock).run(Deadline.never())
    # Then the 2-day-late minute is recomputed (MAX_AGE, 3 days, is the lateness), the other counted
    assert report.recomputed[MINUTE] == 1 and report.late == 1


class RefuseStartItems:
    """DynamoDB refusing every write of a start item (the rest goes through)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.refusing = True

    def batch_write_item(self, **kwargs: Any) -> Any:
        items = [r["PutRequest"]["Item"] for rs in kwargs["RequestItems"].values() for r in rs]
        if self.refusing and any(i["pk"]["S"] == start_pk("readings") for i in items):
            raise ClientError({"Error": {"Code": "ValidationException", "Message": "refused"}}, "BatchWriteItem")
        return self.api.batch_write_item(**kwargs)


def test_marks_whose_start_item_is_not_written_are_handed_back_and_written_again_with_it(dynamodb: Any) -> None:
    faulty = RefuseStartItems(dynamodb)
    store = RollupStore(dynamodb, BatchWriter(faulty, concurrency=1), "control", "readings", 30 * DAY)
    recorder = MarkRecorder(store, MINUTE)
    readings = [(0, "s-1", NOW), (1, "s-2", NOW)]
    # When the start item is refused, every reading's mark counts as unwritten (its record is redelivered)
    failed = recorder.write(readings, NOW, Deadline.never())
    assert sorted(failed) == [0, 1] and all(why.startswith("rollup start not written") for why in failed.values())
    assert store.first_start(ReadCount()) is None
    # And the redelivery writes the marks again, with the start item
    faulty.refusing = False
    assert recorder.write(readings, NOW, Deadline.never()) == {}
    assert store.first_start(ReadCount()) == floor_to(NOW, SLOT_MS)
