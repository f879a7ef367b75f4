"""The compaction handler: its settings from the environment, its report as EMF metrics, and a run
that stopped on an error raised after its metrics are out, the lag among them."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from adapters.batch_writer import BatchWriter
from compaction.logic import StepNotStored
from doubles.lambda_context import FakeLambdaContext
from keydesign.writetier import CompactionState
from tests.integration.compaction.conftest import (
    ENV,
    SETTLED,
    H,
    RefusingWrites,
    cluster_block_of,
    publish,
    runner,
    save_state,
    sparse_fleet,
)
from tests.integration.mocked_aws import emitted_metrics, fresh_handler

pytestmark = pytest.mark.integration


@pytest.fixture
def handler_module(db: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """``compaction.handler`` imported fresh with the tests' environment."""
    for name, value in {**ENV, "POWERTOOLS_SERVICE_NAME": "compaction"}.items():
        monkeypatch.setenv(name, value)
    with fresh_handler("compaction.handler", "RUNNER") as module:
        yield module


def test_a_run_reports_its_metrics_and_one_stopped_by_an_error_raises_it_after_them(
    db: Any, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    publish(db, sparse_fleet(H, devices=10), version=1)
    save_state(db, CompactionState(H))
    # Given DynamoDB refuses every compacted block of the hour
    devices = {f"dev-{d:03d}" for d in range(10)}
    throttling = RefusingWrites(cluster_block_of(devices), code="ValidationException")
    compact = runner([SETTLED], writer=BatchWriter(throttling))
    handler = handler_module.create_handler(compact)
    capsys.readouterr()
    # When the handler runs: the step is not stored, and the run raises why
    with pytest.raises(StepNotStored):
        handler({}, FakeLambdaContext(remaining_ms=30_000, function_name="compaction"))
    # Then its metrics went out first: the lag to the hour it could not finish, nothing compacted
    failed = emitted_metrics(capsys.readouterr().out)
    assert failed["CompactionLagSeconds"] == (SETTLED - H) / 1000 and failed["HoursCompacted"] == 0
    # And once DynamoDB takes the writes, a run compacts the hour and reports it
    throttling.on = False
    summary = handler({}, FakeLambdaContext(remaining_ms=30_000, function_name="compaction"))
    done = emitted_metrics(capsys.readouterr().out)
    assert summary["hours"] == 1 and summary["error"] is None and summary["readings_compacted"] == 30
    assert done["HoursCompacted"] == 1 and done["ReadingsCompacted"] == 30 and done["CompactionCorruptItems"] == 0
    assert done["CompactionLagSeconds"] == (SETTLED - H - 3_600_000) / 1000
    # with its part of the rollups: a partial per group with readings (7 of 8), no mixed entity to re-mark, no redo
    assert (done["PartialsWritten"], done["RemarksWritten"], done["CompactionRedos"]) == (7, 0, 0)
    compact.close()
