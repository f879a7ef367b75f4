"""The app's functions as the local system runs them, each built the way Lambda builds it.

Each gets the environment the stack deploys (:meth:`Context.function_environment`
with the local :class:`FunctionWiring`, plus ``LocalOptions.environment``) and
its size from the configuration; then its handler module is imported
(:mod:`.functions`). Three need a local part, which goes in through their
handler module's factory (``create_handler``) around an object made with it,
never by replacing a module global:

* ingest: a fault injector around its DynamoDB client (``--faults``), and the
  rotator's replay clock as its wall clock while the rotator replays;
* the rotator: :class:`~local_runtime.mappings.LocalLambda` as its Lambda client, and a DynamoDB client
  that answers the Contributor Insights calls moto's server does not serve (:func:`answer_contributor_insights`);
* the rollup function: a clock ``rollup_ahead_s`` ahead of the wall clock (and ``rollup_clock_moved_ms`` more);
* the compaction function: a clock ``compaction_ahead_s`` ahead of the wall clock.
"""

from __future__ import annotations

import importlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

from botocore.awsrequest import AWSResponse

from infra.config import Context, FunctionWiring, LambdaFunction
from local_runtime.faults import FaultInjectingDynamoDB
from local_runtime.functions import Build, FunctionSpec, InvocationFaults, LocalFunction
from rotator.settings import RotatorSettings

if TYPE_CHECKING:
    from local_runtime.options import LocalOptions

#: Module attributes holding what a handler's import made with a thread pool, closed with it.
CLOSE: dict[LambdaFunction, tuple[str, ...]] = {
    LambdaFunction.INGEST: ("INGESTOR",),
    LambdaFunction.HOTKEYS: ("MONITOR",),
    LambdaFunction.ROLLUP: ("RUNNER",),
    LambdaFunction.COMPACTION: ("RUNNER",),
}


class AppFunctions:
    """The functions loaded so far, by name; they share one invocation gate and injected errors."""

    def __init__(self, config: Context, options: LocalOptions) -> None:
        self.config = config
        self.options = options
        self.wiring = FunctionWiring()
        self.loaded: dict[str, LocalFunction] = {}
        #: The fault injectors around ingest's DynamoDB client (``--faults``), for the counters.
        self.write_faults: list[FaultInjectingDynamoDB] = []
        self._gate = threading.Lock()
        fraction = options.faults.invocation_error_fraction
        self.invocation_faults = InvocationFaults(fraction, options.faults.seed) if fraction else None
        #: How far the rollup function's clock has been moved on beyond ``rollup_ahead_s``: the demo moves
        #: it, once publishing has stopped, instead of waiting out real minutes.
        self.rollup_clock_moved_ms = 0
        #: The same for the compaction function's clock beyond ``compaction_ahead_s``.
        self.compaction_clock_moved_ms = 0
        self._lock = threading.Lock()

    def name(self, function: LambdaFunction | str) -> str:
        """The function's name, as the stack names it: ``<stack_name>-<function>``."""
        return f"{self.config.stack_name}-{LambdaFunction(function).value}"

    def arn(self, function: LambdaFunction | str) -> str:
        return FunctionSpec(name=self.name(function), handler="-", region=self.options.region).arn

    def environment(self, function: LambdaFunction) -> dict[str, str]:
        """What the stack gives ``function`` (with :attr:`wiring`), and the local options' variables on top.
        With ``rollups`` off every function runs as with ``rollups: null``."""
        env = self.config.function_environment(function, self.wiring)
        if not self.options.rollups:
            env.pop("ROLLUPS", None)
        if function is LambdaFunction.ROLLUP:
            # The stack's settle is ingest's timeout + 60 s; locally ingest runs in this process, on this clock.
            env["ROLLUP_SETTLE"] = f"{math.ceil(self.timeout_s(LambdaFunction.INGEST)) + 5}s"
        if function is LambdaFunction.COMPACTION:  # the same, for an hour of the write tier
            env["COMPACTION_SETTLE"] = f"{math.ceil(self.timeout_s(LambdaFunction.INGEST)) + 5}s"
        if function is LambdaFunction.ROTATOR and self.rotator_sped_up:
            env.update(RotatorSettings.render(allow_now_override=True))
        return {**env, **self.options.environment.get(function, {})}

    def timeout_s(self, function: LambdaFunction) -> float:
        return float(self.config.sizing(function).timeout_s)

    @property
    def rotator_sped_up(self) -> bool:
        """The rotator runs on a clock other than the wall clock (its event then carries the time)."""
        return self.options.rotator_clock_speed != 1.0 or self.options.rotator_replay_s is not None

    def load(self, spec: FunctionSpec, *, inject_errors: bool = True) -> LocalFunction:
        """Build ``spec``'s handler afresh with its environment; invocations share the gate and (with
        ``inject_errors``) the injected invocation errors."""
        with self._lock:
            if spec.name in self.loaded:
                raise ValueError(f"a function named {spec.name!r} is already loaded")
        function = LocalFunction(
            replace(spec, region=self.options.region),
            gate=self._gate,
            faults=self.invocation_faults if inject_errors else None,
        )
        with self._lock:
            self.loaded[spec.name] = function
        return function

    def start(
        self, function: LambdaFunction, *, build: Build | None = None, inject_errors: bool = True
    ) -> LocalFunction:
        """Load one of the app's functions with the stack's environment and size."""
        sizing = self.config.sizing(function)
        spec = FunctionSpec(
            name=self.name(function),
            handler=function.handler,
            environment=self.environment(function),
            timeout_s=float(sizing.timeout_s),
            memory_mb=sizing.memory_mb,
            build=build,
            close=CLOSE.get(function, ()),
        )
        return self.load(spec, inject_errors=inject_errors)

    def by_arn(self, arn: str) -> LocalFunction | None:
        with self._lock:
            return next((f for f in self.loaded.values() if f.spec.arn == arn), None)

    def ingest_build(self, wall_clock_ms: Callable[[], int] | None) -> Build | None:
        """Ingest's handler around an Ingestor with a fault injector and/or on ``wall_clock_ms``
        (``Ingestor.from_settings`` takes both, for this); None: the module's own."""
        plan = self.options.faults.writes
        if plan is None and wall_clock_ms is None:
            return None

        def build(module: ModuleType) -> tuple[Any, list[Any]]:
            from adapters.clients import client  # noqa: PLC0415 - after the environment is set
            from ingest.logic import Ingestor  # noqa: PLC0415

            injector = FaultInjectingDynamoDB(client("dynamodb", max_attempts=1), plan) if plan is not None else None
            if injector is not None:
                self.write_faults.append(injector)
            wall = wall_clock_ms or (lambda: time.time_ns() // 1_000_000)
            ingestor = Ingestor.from_settings(module.SETTINGS, dynamodb=injector, wall_clock_ms=wall)
            return module.create_handler(ingestor), [ingestor]

        return build

    @staticmethod
    def rotator_build(lambda_client: Any, dynamodb: Any) -> Build:
        """The rotator's handler around a Rotator on these clients (see the module's docstring)."""

        def build(module: ModuleType) -> tuple[Any, list[Any]]:
            from rotator.logic import Rotator  # noqa: PLC0415 - after the environment is set

            answer_contributor_insights(dynamodb)
            rotator = Rotator(module.SETTINGS, dynamodb=dynamodb, lambda_client=lambda_client)
            return module.create_handler(rotator), []

        return build

    def rollup_build(self, ahead_s: float) -> Build | None:
        """The rollup function's handler on a clock ``ahead_s`` (and :attr:`rollup_clock_moved_ms`) ahead of
        the wall clock (None: the module's)."""
        return self._runner_ahead("rollup.logic", "RollupRunner", ahead_s, lambda: self.rollup_clock_moved_ms)

    def compaction_build(self, ahead_s: float) -> Build | None:
        """The compaction function's handler on a clock ``ahead_s`` (and :attr:`compaction_clock_moved_ms`)
        ahead of the wall clock (None: the module's)."""
        return self._runner_ahead(
            "compaction.logic", "CompactionRunner", ahead_s, lambda: self.compaction_clock_moved_ms
        )

    @staticmethod
    def _runner_ahead(logic: str, runner: str, ahead_s: float, moved_ms: Callable[[], int]) -> Build | None:
        """A handler around ``logic``'s ``runner`` (imported once the environment is set), made from the
        module's settings on a clock ``ahead_s`` plus ``moved_ms()`` ahead of the wall clock."""
        if not ahead_s:
            return None
        ahead_ms = int(ahead_s * 1000)

        def build(module: ModuleType) -> tuple[Any, list[Any]]:
            made = getattr(importlib.import_module(logic), runner).from_settings(
                module.SETTINGS, clock_ms=lambda: time.time_ns() // 1_000_000 + ahead_ms + moved_ms()
            )
            return module.create_handler(made), [made]

        return build

    def stats(self) -> dict[str, Any]:
        return {
            "functions": {name: f.stats.as_dict() for name, f in self.loaded.items()},
            "write_faults": [
                {
                    "calls": w.counters.calls,
                    "throttled": w.counters.throttled,
                    "partial_calls": w.counters.partial_calls,
                    "items_held_back": w.counters.held_back,
                }
                for w in self.write_faults
            ],
            "invocation_errors_injected": self.invocation_faults.injected if self.invocation_faults else 0,
        }

    def close(self) -> None:
        for function in self.loaded.values():
            function.close()


def answer_contributor_insights(dynamodb: Any) -> None:
    """DescribeContributorInsights and UpdateContributorInsights on a botocore client, answered here:
    moto's server does not serve them (a 500). Each table's status is kept, enabled at once (as moto
    makes tables ACTIVE at once). Nothing is measured: locally there is no traffic to rank."""
    tables: dict[str, dict[str, str]] = {}

    def describe(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        name = json.loads(params["body"])["TableName"]
        return _answer({"TableName": name, "ContributorInsightsStatus": "DISABLED", **tables.get(name, {})})

    def update(params: dict[str, Any], **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        body = json.loads(params["body"])
        if body["ContributorInsightsAction"] == "ENABLE":
            mode = body.get("ContributorInsightsMode", "ACCESSED_AND_THROTTLED_KEYS")
            tables[body["TableName"]] = {"ContributorInsightsStatus": "ENABLED", "ContributorInsightsMode": mode}
        else:
            tables.pop(body["TableName"], None)
        return describe(params)

    dynamodb.meta.events.register("before-call.dynamodb.DescribeContributorInsights", describe)
    dynamodb.meta.events.register("before-call.dynamodb.UpdateContributorInsights", update)


def _answer(parsed: dict[str, Any]) -> tuple[AWSResponse, dict[str, Any]]:
    """A botocore ``before-call`` answer: the call is not sent, this is its parsed response."""
    return AWSResponse("http://127.0.0.1/", 200, {}, None), parsed
