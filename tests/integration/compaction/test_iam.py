"""IAM conformance of the compaction function (tests/integration/iam_conformance.py)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.retry import Deadline
from compaction.logic import CompactionRunner
from keydesign.rollup import RedoRequest
from tests.integration.compaction.conftest import (
    SETTINGS,
    SETTLED,
    TIER,
    H,
    compacted,
    publish,
    put_dense,
    put_redo,
    reading,
    sparse_fleet,
)
from tests.integration.iam_conformance import assert_conforms, recording

pytestmark = pytest.mark.integration


def test_every_call_the_compaction_function_makes_is_granted_to_its_role(db: Any) -> None:
    # Given an hour of sparse readings in the write tier and a dense entity's blocks beside them
    publish(db, sparse_fleet(H, devices=5), version=2)
    put_dense(db, [reading("hot", H + n * 1_000, f"h{n}") for n in range(8)], version=3)
    # and the rollup function's request to redo the hour for one device (a late reading)
    request = RedoRequest(H, TIER.group_of("dev-000"), "dev-000")
    put_redo(db, request)
    # When the compaction function runs once the hour has settled (its first run: it saves its state,
    # compacts, puts its partials and parts of the totals), and again (it redoes the hour)
    with recording("compaction") as called:
        runner = CompactionRunner.from_settings(SETTINGS, clock_ms=lambda: SETTLED)
        try:
            report = runner.run(Deadline.never())
            again = runner.run(Deadline.never())
        finally:
            runner.close()
    assert report.dense_marks == 1 and report.compacted_blocks > 0 and compacted(db)
    assert report.partials > 0 and report.fleet_parts > 0 and (again.redos, again.remarks > 0) == (1, True)
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms(
        "compaction",
        called,
        not_called={"sqs:SendMessage": "Lambda sends a failed asynchronous invocation to the function's failure queue"},
    )
