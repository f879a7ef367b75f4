"""Lambda functions, in process: loaded from their handler path, invoked with a Lambda-like context.

A function is built the way Lambda builds it: its environment first, then the
handler module imported *fresh* (which parses its settings and makes its
objects, as a cold start does), the environment applied for that only: two
functions may then read different values of one variable, as two Lambdas
would. A function the local runtime needs with a part of its own (a fault
injector around a client, a replayed clock) is built by its handler module's
factory (``create_handler``) around objects made with that part; no module
global is replaced after import. Everything else (the AWS endpoint,
credentials, Powertools switches) is process-wide and set by
:class:`local_runtime.system.LocalSystem`.

Handlers share one interpreter, and with it module state that separate Lambda
containers would not share (Powertools' metric set and logger keys are
module-level). Invocations therefore run one at a time across every function
(they share one lock, the gate), which keeps that state coherent; the
handlers' own thread pools still work in parallel inside an invocation.
"""

from __future__ import annotations

import importlib
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from local_runtime.environment import ACCOUNT_ID, patched_environ

Handler = Callable[[Any, Any], Any]
#: Builds the handler from the freshly imported module (its factory around objects made with local
#: parts); returns it and those objects, closed with the function.
Build = Callable[[ModuleType], tuple[Handler, Sequence[Any]]]
_IMPORT_LOCK = threading.Lock()


class FunctionError(Exception):
    """The invocation failed the way Lambda reports ``FunctionError: Unhandled``."""


class FunctionTimeoutError(FunctionError):
    """The handler returned after its timeout: Lambda would have stopped it and reported an error."""


class InjectedInvocationError(FunctionError):
    """An invocation failed on purpose (``--faults invoke_errors=...``), after the handler ran."""


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    """A function as local mode runs it.

    ``handler`` is the Lambda handler string (``ingest.handler.handler``).
    ``build``, when given, makes the handler from the imported module instead
    of taking its attribute. ``close`` names module attributes holding objects
    the import made (a thread pool), closed when the function stops: in Lambda
    the container's end does that, here the process lives on.
    """

    name: str
    handler: str
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    memory_mb: int = 1024
    region: str = "us-east-1"
    build: Build | None = None
    close: tuple[str, ...] = ()

    @property
    def arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{ACCOUNT_ID}:function:{self.name}"


class LambdaContext:
    """The context object a handler receives (the attributes Powertools and handlers read)."""

    def __init__(self, spec: FunctionSpec, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._deadline = clock() + spec.timeout_s
        self.function_name = spec.name
        self.function_version = "$LATEST"
        self.invoked_function_arn = spec.arn
        self.memory_limit_in_mb = spec.memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{spec.name}"
        self.log_stream_name = f"local/[$LATEST]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self.tenant_id = None

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self._clock()) * 1000))


def import_handler(spec: FunctionSpec) -> tuple[ModuleType, Handler, list[Any]]:
    """Import the handler's module afresh with the function's environment and build its handler;
    return the module, the handler and what to close with it."""
    module_name, _, attribute = spec.handler.rpartition(".")
    if not module_name:
        raise ValueError(f"handler {spec.handler!r} is not 'module.function'")
    with _IMPORT_LOCK, patched_environ(dict(spec.environment)):
        sys.modules.pop(module_name, None)
        module = importlib.import_module(module_name)
        closing = [getattr(module, name) for name in spec.close]
        handler: Any
        if spec.build is not None:
            handler, built = spec.build(module)
            closing.extend(built)
        else:
            handler = getattr(module, attribute, None)
    if not callable(handler):
        raise ValueError(f"handler {spec.handler!r}: {module_name} has no function {attribute!r}")
    return module, handler, closing


class InvocationFaults:
    """Fails a fraction of invocations *after* the handler ran: its side effects stand, the
    caller sees an error and redelivers. That is the case that tests idempotency."""

    def __init__(self, fraction: float, seed: int | None = None) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"invocation error fraction must lie in 0..1, got {fraction}")
        self.fraction = fraction
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.injected = 0

    def strike(self) -> bool:
        with self._lock:
            hit = self._rng.random() < self.fraction
            self.injected += hit
        return hit


@dataclass(slots=True)
class FunctionStats:
    invocations: int = 0
    errors: int = 0
    timeouts: int = 0
    injected_errors: int = 0
    duration_ms_total: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "invocations": self.invocations,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "injected_errors": self.injected_errors,
            "mean_duration_ms": round(self.duration_ms_total / self.invocations, 1) if self.invocations else None,
        }


class LocalFunction:
    """One function, loaded and invocable: ``invoke(event)`` returns the handler's result or raises
    :class:`FunctionError` (the handler raised, timed out, or a fault was injected)."""

    def __init__(
        self,
        spec: FunctionSpec,
        *,
        gate: threading.Lock | None = None,
        faults: InvocationFaults | None = None,
        handler: Handler | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.spec = spec
        self._module: ModuleType | None = None
        self._closing: list[Any] = []
        if handler is None:
            self._module, handler, self._closing = import_handler(spec)
        self._handler = handler
        self._gate = gate or threading.Lock()
        self._faults = faults
        self._clock = clock
        self._lock = threading.Lock()
        self.stats = FunctionStats()

    @property
    def name(self) -> str:
        return self.spec.name

    def invoke(self, event: Any) -> Any:
        with self._gate:
            context = LambdaContext(self.spec, clock=self._clock)
            started = self._clock()
            try:
                result = self._handler(event, context)
            except Exception as exc:
                self._count(started, error=True)
                raise FunctionError(f"{self.spec.name}: {type(exc).__name__}: {exc}") from exc
            elapsed = self._clock() - started
            if elapsed > self.spec.timeout_s:
                self._count(started, error=True, timeout=True)
                raise FunctionTimeoutError(f"{self.spec.name}: task timed out after {self.spec.timeout_s:.2f} seconds")
            if self._faults is not None and self._faults.strike():
                self._count(started, error=True, injected=True)
                raise InjectedInvocationError(f"{self.spec.name}: injected invocation error")
            self._count(started)
            return result

    def _count(self, started: float, *, error: bool = False, timeout: bool = False, injected: bool = False) -> None:
        with self._lock:
            stats = self.stats
            stats.invocations += 1
            stats.errors += error
            stats.timeouts += timeout
            stats.injected_errors += injected
            stats.duration_ms_total += (self._clock() - started) * 1000

    def close(self) -> None:
        module, self._module = self._module, None
        if module is None:
            return
        for target in self._closing:
            target.close()
        # A later import (another system, a test) must parse its own environment.
        if sys.modules.get(module.__name__) is module:
            del sys.modules[module.__name__]
