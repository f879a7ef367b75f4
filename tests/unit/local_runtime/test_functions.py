"""Handlers in process: imported fresh with their environment, invoked with a Lambda-like context."""

from __future__ import annotations

import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from doubles.clocks import ManualClock
from local_runtime.functions import (
    FunctionError,
    FunctionSpec,
    FunctionTimeoutError,
    InjectedInvocationError,
    InvocationFaults,
    LocalFunction,
)


@pytest.fixture
def handler_module(tmp_path: Path) -> Iterator[str]:
    """A handler module that reads its settings from the environment at import, like ours."""
    (tmp_path / "local_runtime_probe.py").write_text(
        textwrap.dedent(
            """
            import os
            TABLE = os.environ["PROBE_TABLE"]
            IMPORTS = []
            IMPORTS.append(TABLE)

            def handler(event, context):
                return {"table": TABLE, "event": event, "name": context.function_name,
                        "memory": context.memory_limit_in_mb, "remaining": context.get_remaining_time_in_millis(),
                        "arn": context.invoked_function_arn, "request": context.aws_request_id}
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    yield "local_runtime_probe.handler"
    sys.path.remove(str(tmp_path))
    sys.modules.pop("local_runtime_probe", None)


def test_a_handler_is_imported_with_its_environment_only(handler_module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROBE_TABLE", raising=False)
    clock = ManualClock(100.0)
    spec = FunctionSpec(
        name="probe", handler=handler_module, environment={"PROBE_TABLE": "t-1"}, timeout_s=30, region="eu-west-1"
    )
    function = LocalFunction(spec, clock=clock)
    result = function.invoke({"x": 1})
    assert result["table"] == "t-1"
    assert (result["name"], result["memory"], result["remaining"]) == ("probe", 1024, 30_000)
    assert result["arn"] == "arn:aws:lambda:eu-west-1:123456789012:function:probe"
    import os  # noqa: PLC0415

    assert "PROBE_TABLE" not in os.environ
    # A second function from the same module gets its own import with its own environment
    other = LocalFunction(FunctionSpec(name="other", handler=handler_module, environment={"PROBE_TABLE": "t-2"}))
    assert other.invoke({})["table"] == "t-2"
    assert function.invoke({})["table"] == "t-1"
    other.close()
    function.close()
    assert "local_runtime_probe" not in sys.modules


def test_a_bad_handler_path_is_refused(handler_module: str) -> None:
    with pytest.raises(ValueError, match=r"module\.function"):
        LocalFunction(FunctionSpec(name="x", handler="handler"))
    with pytest.raises(ValueError, match="no function"):
        LocalFunction(FunctionSpec(name="x", handler="local_runtime_probe.nothing", environment={"PROBE_TABLE": "t"}))


def spec(timeout_s: float = 10.0) -> FunctionSpec:
    return FunctionSpec(name="fn", handler="unused.handler", timeout_s=timeout_s)


def test_the_remaining_time_counts_down_from_the_timeout() -> None:
    clock = ManualClock(100.0)

    def handler(_event: Any, context: Any) -> list[int]:
        first = context.get_remaining_time_in_millis()
        clock.now += 4.5
        return [first, context.get_remaining_time_in_millis()]

    assert LocalFunction(spec(), handler=handler, clock=clock).invoke({}) == [10_000, 5_500]


def test_an_exception_is_a_function_error_and_counted() -> None:
    def handler(_event: Any, _context: Any) -> None:
        raise KeyError("boom")

    function = LocalFunction(spec(), handler=handler)
    with pytest.raises(FunctionError, match="KeyError"):
        function.invoke({})
    assert (function.stats.invocations, function.stats.errors) == (1, 1)


def test_a_handler_returning_after_its_timeout_is_a_timeout() -> None:
    clock = ManualClock(100.0)

    def slow(_event: Any, _context: Any) -> str:
        clock.now += 11
        return "late"

    function = LocalFunction(spec(timeout_s=10), handler=slow, clock=clock)
    with pytest.raises(FunctionTimeoutError):
        function.invoke({})
    assert function.stats.timeouts == 1


def test_injected_invocation_errors_happen_after_the_handler_ran() -> None:
    calls: list[Any] = []
    function = LocalFunction(spec(), handler=lambda e, _c: calls.append(e), faults=InvocationFaults(1.0, seed=1))
    with pytest.raises(InjectedInvocationError):
        function.invoke({"n": 1})
    assert calls == [{"n": 1}]
    assert function.stats.injected_errors == 1


def test_an_injected_fraction_is_roughly_that_fraction() -> None:
    faults = InvocationFaults(0.3, seed=4)
    hits = sum(faults.strike() for _ in range(2_000))
    assert 500 < hits < 700
    assert faults.injected == hits
    with pytest.raises(ValueError):
        InvocationFaults(1.5)


def test_the_gate_bounds_concurrent_invocations() -> None:
    gate = threading.Lock()
    inside = threading.Semaphore(0)
    release = threading.Event()
    running = []
    lock = threading.Lock()

    def handler(_event: Any, _context: Any) -> None:
        with lock:
            running.append(1)
            assert len(running) == 1
        inside.release()
        release.wait(5)
        with lock:
            running.pop()

    function = LocalFunction(spec(), handler=handler, gate=gate)
    threads = [threading.Thread(target=function.invoke, args=({},)) for _ in range(3)]
    for t in threads:
        t.start()
    assert inside.acquire(timeout=5)
    assert not inside.acquire(timeout=0.2)  # the others wait at the gate
    release.set()
    for t in threads:
        t.join(5)
    assert function.stats.invocations == 3 and function.stats.errors == 0
