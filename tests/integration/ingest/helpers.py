"""Invoke the real handler and keep the logic's outcome for the conservation check."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from doubles.lambda_context import FakeLambdaContext
from ingest.logic import BatchOutcome
from tests.integration.mocked_aws import Invocation, invoke_spying


def invoke(
    module: ModuleType,
    event: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    context: FakeLambdaContext | None = None,
) -> Invocation[BatchOutcome]:
    """Call ``module.handler`` as Lambda would; return its response, the outcome and the metrics."""
    invocation = invoke_spying(
        module.handler, event, context or FakeLambdaContext(), capsys, logic=module.INGESTOR, method="ingest"
    )
    assert_conservation(event, invocation)
    return invocation


def assert_conservation(event: dict[str, Any], invocation: Invocation[BatchOutcome]) -> None:
    """Every reading is written, rejected, or in a record reported for redelivery; nothing else."""
    outcome = invocation.outcome
    assert [r.sequence_number for r in outcome.records] == [r["kinesis"]["sequenceNumber"] for r in event["Records"]], (
        "every record of the event has an outcome, in order"
    )
    for record in outcome.records:
        assert record.readings == record.written + record.rejected + record.retry, record
    assert outcome.readings == outcome.written + outcome.rejected + outcome.retry
    reported = set(invocation.failed)
    assert reported == {r.sequence_number for r in outcome.records if r.retry}, (
        "exactly the records with pending readings are reported"
    )
    assert invocation.response == {"batchItemFailures": [{"itemIdentifier": s} for s in invocation.failed]}
