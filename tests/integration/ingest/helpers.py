"""Invoke the real handler and keep the logic's outcome for the conservation check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest

from doubles.lambda_context import FakeLambdaContext
from ingest.logic import BatchOutcome
from tests.unit.ingest.kinesis_events import failed_sequences


@dataclass
class Invocation:
    response: dict[str, Any]
    outcome: BatchOutcome
    emf: list[dict[str, Any]]

    @property
    def failed(self) -> list[str]:
        return failed_sequences(self.response)

    def metric(self, name: str) -> float:
        """The value of metric ``name`` in the EMF blob the handler flushed."""
        for blob in self.emf:
            if name in blob:
                value = blob[name]
                return float(sum(value) if isinstance(value, list) else value)
        raise AssertionError(f"metric {name} was not emitted; got {sorted(k for b in self.emf for k in b)}")


def invoke(
    module: ModuleType,
    event: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    context: FakeLambdaContext | None = None,
) -> Invocation:
    """Call ``module.handler`` as Lambda would; return its response, the outcome and the metrics."""
    outcomes: list[BatchOutcome] = []
    ingestor = module.INGESTOR
    real = ingestor.ingest

    def spy(records: Any, remaining_ms: int) -> BatchOutcome:
        outcome = real(records, remaining_ms)
        outcomes.append(outcome)
        return outcome

    ingestor.ingest = spy
    try:
        capsys.readouterr()
        response = module.handler(event, context or FakeLambdaContext())
    finally:
        del ingestor.ingest
    out = capsys.readouterr().out
    emf = [blob for blob in (_json(line) for line in out.splitlines()) if blob and "_aws" in blob]
    invocation = Invocation(response, outcomes[0], emf)
    assert_conservation(event, invocation)
    return invocation


def _json(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def assert_conservation(event: dict[str, Any], invocation: Invocation) -> None:
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
