"""moto's in-process AWS for the integration tests: one way to enter it, one readings-table shape,
and what the functions' tests share: a handler imported fresh, an invocation with the logic's
outcome and the metrics it printed, and every page of a Scan or Query."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Generic, TypeVar

import boto3
import botocore.session
import pytest
from botocore.loaders import create_loader
from moto import mock_aws

from adapters.clients import reset_clients
from adapters.observability import metrics
from local_runtime import moto_speedups

Outcome = TypeVar("Outcome")

#: The service models and endpoint rules, read from disk once per process. moto's mock leaves boto3
#: without a default session, so each test's first ``boto3.client`` made a session of its own that read
#: them again (about 0.15 s a client: a sixth of tests/integration/query's time). The loader caches
#: what it reads, and every session's clients already share those models read-only.
_MODELS = create_loader()


@contextmanager
def mocked_aws(
    monkeypatch: pytest.MonkeyPatch, region: str, *, service: str | None = None, **env: str
) -> Iterator[None]:
    """Inside: test credentials and ``region`` (plus ``env``), no endpoint override, moto's mock, and
    the adapters' cached clients made afresh on entry and on exit. ``service`` names the function
    under test to Powertools, in the stack's metrics namespace, with tracing off."""
    powertools = (
        {}
        if service is None
        else {
            "POWERTOOLS_SERVICE_NAME": service,
            "POWERTOOLS_METRICS_NAMESPACE": "TimeSeries",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
    )
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        **powertools,
        **env,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    # The local runtime's speed-ups to moto (same results: tests/unit/local_runtime/test_moto_speedups.py)
    # make a Query cost what it returns, not the size of its table, here as in local mode, and apply
    # each item write atomically, as DynamoDB does (tests that run containers in threads need it).
    moto_speedups.install()
    try:
        with mock_aws():
            session = botocore.session.Session()
            session.register_component("data_loader", _MODELS)
            boto3.setup_default_session(botocore_session=session)
            reset_clients()
            yield
            reset_clients()
    finally:
        moto_speedups.uninstall()


def create_readings_table(dynamodb: Any, name: str, *, stream: bool = False) -> None:
    """A table with the readings tables' key schema (string pk and sk), on demand; ``stream`` adds a
    KEYS_ONLY stream, as the stack's tables have."""
    extra: dict[str, Any] = {}
    if stream:
        extra["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )


def all_items(dynamodb: Any, operation: str, **request: Any) -> list[dict[str, Any]]:
    """Every item a ``"scan"`` or ``"query"`` of ``request`` returns, page after page (LastEvaluatedKey followed)."""
    return [item for page in dynamodb.get_paginator(operation).paginate(**request) for item in page["Items"]]


@contextmanager
def fresh_handler(name: str, container: str) -> Iterator[ModuleType]:
    """The handler module ``name`` imported afresh, as a new Lambda container imports it (its settings
    and clients are made at import), with no metrics pending; on exit its ``container`` attribute
    (the logic it built) is closed and the module forgotten."""
    sys.modules.pop(name, None)
    module = importlib.import_module(name)
    metrics.clear_metrics()
    try:
        yield module
    finally:
        getattr(module, container).close()
        sys.modules.pop(name, None)
        metrics.clear_metrics()


def emf_blobs(out: str) -> list[dict[str, Any]]:
    """The EMF documents (JSON objects with an ``_aws`` key) among the lines a run printed."""
    blobs: list[dict[str, Any]] = []
    for line in out.splitlines():
        try:
            blob = json.loads(line)
        except ValueError:
            continue
        if isinstance(blob, dict) and "_aws" in blob:
            blobs.append(blob)
    return blobs


def emitted_metrics(out: str) -> dict[str, float]:
    """The run's metrics by name, from its EMF lines (the cold start's has a line of its own); a
    metric with several values counts their sum."""
    found: dict[str, float] = {}
    for blob in emf_blobs(out):
        for directive in blob["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = blob[metric["Name"]]
                found[metric["Name"]] = sum(value) if isinstance(value, list) else value
    return found


@dataclass
class Invocation(Generic[Outcome]):
    """A handler's response, the outcome its logic returned and the EMF documents it printed."""

    response: dict[str, Any]
    outcome: Outcome
    emf: list[dict[str, Any]]

    @property
    def failed(self) -> list[str]:
        """The identifiers of the records the response hands back for redelivery."""
        return [str(f["itemIdentifier"]) for f in self.response.get("batchItemFailures", [])]

    def metric(self, name: str) -> float:
        """The value of metric ``name`` in the EMF the handler flushed (a list of values: their sum)."""
        for blob in self.emf:
            if name in blob:
                value = blob[name]
                return float(sum(value) if isinstance(value, list) else value)
        raise AssertionError(f"metric {name} was not emitted; got {sorted(k for b in self.emf for k in b)}")

    def dimensioned(self, name: str) -> list[dict[str, Any]]:
        """Every EMF document that carries metric ``name`` (one per set of dimensions)."""
        return [blob for blob in self.emf if name in blob]


def invoke_spying(
    handler: Callable[[dict[str, Any], Any], Any],
    event: dict[str, Any],
    context: Any,
    capsys: pytest.CaptureFixture[str],
    *,
    logic: Any,
    method: str,
) -> Invocation[Any]:
    """Call ``handler`` as Lambda would, keeping what ``logic.method`` returned (its first call) and
    the EMF printed meanwhile."""
    outcomes: list[Any] = []
    real = getattr(logic, method)

    def spy(*args: Any) -> Any:
        outcome = real(*args)
        outcomes.append(outcome)
        return outcome

    setattr(logic, method, spy)
    try:
        capsys.readouterr()
        response = handler(event, context)
    finally:
        delattr(logic, method)
    return Invocation(dict(response), outcomes[0], emf_blobs(capsys.readouterr().out))
