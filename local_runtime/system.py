"""The whole system on one machine: ``with LocalSystem(config) as system:``.

Starting it, in order: the function log router (:mod:`.function_logs`), the
embedded moto server (:mod:`.moto_server`), the process environment that
points every AWS client at it (:mod:`.environment`), the resources built from
the same :class:`Context` as the stack (:mod:`.resources`), then each
function (:mod:`.app_functions`) with its trigger:

* ingest on the Kinesis stream, through an event source mapping (:mod:`.mappings`);
* query behind the REST API emulator (:mod:`.api_gateway`; ``LocalOptions.query_api``);
* the hot-key detector on every readings table's stream (``LocalOptions.hot_keys``);
  with a table period and the rotator on, the rotator creates those mappings, as in AWS;
* the rotator on its schedule (:mod:`.scheduler`; only with a table period), on
  a speed-up clock or replaying its past, ingest then on the same clock;
* the rollup function on its schedule (``LocalOptions.rollups``);
* the compaction function on its schedule (``LocalOptions.compaction``; with the write tier);
* Lambda's Invoke API on loopback for every function (:mod:`.lambda_api`): ingest asks the
  rotator for a missing table through it, as in AWS, and ``tsctl replay`` puts failed batches
  through ingest or the hot-key function (``Endpoints.lambda_endpoint_url``).

Stopping undoes it all in reverse, whatever failed on the way. The plug points
(``functions.load``, :meth:`~LocalSystem.serve_api`, ``mappings.follow_tables``,
:meth:`~LocalSystem.schedule`) are public for tests and other handlers.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, TextIO, TypeVar

from adapters.clients import reset_clients
from adapters.settings import CommonSettings
from infra.config import METRICS_NAMESPACE, Context, FunctionWiring, LambdaFunction
from local_runtime.api_gateway import RestApi
from local_runtime.app_functions import AppFunctions
from local_runtime.environment import aws_environment, local_client, patched_environ
from local_runtime.event_source_mapping import FailureDestination, MappingConfig
from local_runtime.function_logs import FunctionLogRouter
from local_runtime.functions import LocalFunction
from local_runtime.lambda_api import LambdaInvokeApi
from local_runtime.mappings import LocalLambda, StreamMappings
from local_runtime.moto_server import EmbeddedMoto
from local_runtime.options import LocalOptions
from local_runtime.resources import ResourceNames, Resources, existing_readings_tables, provision
from local_runtime.scheduler import ReplayClock, Schedule, SimulatedClock, empty_event, now_event
from local_runtime.stream_sources import DynamoDBStreamSource, KinesisSource

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What a user (or a test) needs to reach the running system."""

    region: str
    endpoint_url: str
    stream_name: str
    stream_arn: str
    readings_tables: tuple[str, ...]
    control_table: str
    rejects_queue_url: str
    ingest_failures_queue_url: str
    alarm_topic_arn: str
    api_url: str | None = None
    hotkeys_failures_queue_url: str | None = None
    #: Lambda's Invoke API for the functions (a boto3 Lambda client's ``endpoint_url``).
    lambda_endpoint_url: str | None = None
    #: The functions running, by their stack name (``<stack_name>-<function>``).
    functions: tuple[str, ...] = ()


class LocalSystem:
    """The running system. Not reusable: start it once, stop it once."""

    def __init__(self, config: Context, options: LocalOptions | None = None) -> None:
        self.config = config
        self.options = options or LocalOptions()
        self._exit = ExitStack()
        self._moto = EmbeddedMoto(self.options.moto_port)
        self.functions = AppFunctions(config, self.options)
        self.schedules: list[Schedule] = []
        #: The rotator's clock (None without the rotator); ingest's too when it replays.
        self.clock: SimulatedClock | ReplayClock | None = None
        #: Every rotator run that returned: ``{"now_ms": ..., "summary": <its summary>}``, in order.
        self.rotations: list[dict[str, Any]] = []
        #: The rotator's Lambda client for its stream mappings (None without the rotator).
        self.lambda_api: LocalLambda | None = None
        self.api: RestApi | None = None
        self.lambda_invoke = LambdaInvokeApi(self.functions.loaded.get)
        self._mappings: StreamMappings | None = None
        self._resources: Resources | None = None
        self._router: FunctionLogRouter | None = None
        self._lock = threading.Lock()
        self._started = False

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Endpoints:
        if self._started:
            raise RuntimeError("a LocalSystem starts once")
        self._started = True
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self.endpoints

    def _start(self) -> None:
        options, config = self.options, self.config
        if options.function_log is not None:
            options.function_log.parent.mkdir(parents=True, exist_ok=True)
            self._router = FunctionLogRouter(self._exit.enter_context(options.function_log.open("a", encoding="utf-8")))
            self._router.install()
            self._exit.callback(self._router.uninstall)
        self._moto.start()
        self._exit.callback(self._moto.stop)
        self._exit.enter_context(
            patched_environ(
                {
                    **aws_environment(self.endpoint_url, options.region),
                    "POWERTOOLS_TRACE_DISABLED": "true",
                    "POWERTOOLS_LOG_LEVEL": "INFO",
                    **CommonSettings.render(metrics_namespace=METRICS_NAMESPACE),
                }
            )
        )
        # Cached clients made before the environment changed would point elsewhere.
        reset_clients()
        self._exit.callback(reset_clients)

        rotates = options.rotator and config.table_period is not None
        names = ResourceNames.for_config(config, int(time.time() * 1000))
        services = ("dynamodb", "kinesis", "sqs", "sns", "secretsmanager", "s3")
        self._resources = provision(
            config,
            # The rotator builds every per-period table, as in AWS (the stack makes none).
            replace(names, readings_tables=()) if rotates else names,
            cursor_secret=options.cursor_secret,
            export_bucket=config.export_bucket if rotates else None,
            **{s: self.client(s) for s in services},
        )
        r = self._resources
        self.functions.wiring = FunctionWiring(
            rejects_queue_url=r.rejects_queue_url,
            cursor_secret_arn=r.cursor_secret_arn,
            alert_topic_arn=r.alarm_topic_arn,
            hotkeys_function_arn=self.functions.arn(LambdaFunction.HOTKEYS),
            hotkeys_on_failure_arn=r.hotkeys_failures_queue_arn,
            rotator_function=self.functions.name(LambdaFunction.ROTATOR) if rotates else None,
        )
        # Before any function is built: the Lambda clients they make (ingest's, which asks the
        # rotator for tables) go to the local Invoke API.
        self._exit.callback(self.lambda_invoke.stop)
        self._exit.enter_context(patched_environ({"AWS_ENDPOINT_URL_LAMBDA": self.lambda_invoke.start()}))
        reset_clients()
        streams = self.client("dynamodbstreams")
        self._mappings = StreamMappings(
            dynamodb=self.client("dynamodb"),
            table_stream=lambda arn: DynamoDBStreamSource(streams, arn, region=options.region),
            tables=self.readings_tables,
            stop_timeout_s=self.functions.timeout_s(LambdaFunction.INGEST) + 5,
        )
        self._exit.callback(self._stop_components)
        if rotates and options.rotator_replay_s is not None:
            # Made now: ingest runs on it. It stands still until the rotator's schedule moves it.
            self.clock = self._rotator_clock()
        self._start_ingest()
        if options.query_api:
            # No injected invocation errors: they exist to make stream batches redeliver, and an API
            # client would only see API Gateway's 502 for them.
            self.serve_api(self.functions.start(LambdaFunction.QUERY, inject_errors=False))
        if options.hot_keys:
            hotkeys = self.functions.start(LambdaFunction.HOTKEYS)
            if not rotates:  # with the rotator, it maps each table's stream, as in AWS
                config_ = MappingConfig.for_stream(config, "hotkeys", poll_interval_s=options.poll_interval_s)
                self.mappings.follow_tables(hotkeys, config_, self._queue(r.hotkeys_failures_queue_url))
        if rotates:
            self._start_rotator()
        if options.rollups and config.rollups:
            rollup = self.functions.start(
                LambdaFunction.ROLLUP, build=self.functions.rollup_build(options.rollup_ahead_s)
            )
            # The first run one period after the start, as a new schedule's in AWS.
            self.schedule(rollup, every_s=options.rollup_every_s, run_now=False)
        if options.compaction and config.write_tier_groups:
            compaction = self.functions.start(
                LambdaFunction.COMPACTION, build=self.functions.compaction_build(options.compaction_ahead_s)
            )
            every_s = options.compaction_every_s or config.compaction_every_minutes * 60.0
            self.schedule(compaction, every_s=every_s, run_now=False)

    def stop(self) -> None:
        """Stop everything that started, in reverse order. Safe to call twice."""
        self._exit.close()

    def __enter__(self) -> LocalSystem:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _stop_components(self) -> None:
        for schedule in self.schedules:
            schedule.stop(self.functions.timeout_s(LambdaFunction.INGEST))
        if self.api is not None:
            self.api.stop()
        if self._mappings is not None:
            self._mappings.stop()
        self.lambda_invoke.stop(self.functions.timeout_s(LambdaFunction.INGEST))
        self.functions.close()

    # -- the functions' triggers ----------------------------------------------------------

    def _start_ingest(self) -> None:
        clock = self.clock if isinstance(self.clock, ReplayClock) else None
        ingest = self.functions.start(
            LambdaFunction.INGEST, build=self.functions.ingest_build(clock.now_ms if clock is not None else None)
        )
        r = self.resources
        self.mappings.add(
            name="ingest",
            source=KinesisSource(
                self.client("kinesis"), r.stream_arn, region=self.options.region, function_name=ingest.name
            ),
            function=ingest,
            config=MappingConfig.for_stream(self.config, "ingest", poll_interval_s=self.options.poll_interval_s),
            destination=self._queue(r.ingest_failures_queue_url),
        )

    def _start_rotator(self) -> None:
        r = self.resources
        queues = {
            r.hotkeys_failures_queue_arn: r.hotkeys_failures_queue_url,
            r.ingest_failures_queue_arn: r.ingest_failures_queue_url,
        }
        self.lambda_api = LocalLambda(
            self.mappings,
            function_by_arn=self.functions.by_arn,
            destination_for=lambda arn: self._queue(queues[arn]) if arn in queues else None,
            poll_interval_s=self.options.poll_interval_s,
        )
        build = self.functions.rotator_build(self.lambda_api, self.client("dynamodb"))
        rotator = self.functions.start(LambdaFunction.ROTATOR, build=build)
        self.clock = self.clock or self._rotator_clock()
        schedule = Schedule(
            rotator.name,
            rotator.invoke,
            every_s=self.config.rotation_interval_minutes() * 60.0,
            clock=self.clock,
            event=now_event if self.functions.rotator_sped_up else empty_event,
            # list.append is atomic: readers copy the list (list(system.rotations)) while runs add to it.
            on_result=lambda now_ms, result: self.rotations.append({"now_ms": now_ms, "summary": result}),
        )
        # The first run happens here, before start() returns: the tables (and their stream mappings)
        # it makes exist by the time anyone publishes. The schedule then runs it every period.
        schedule.run_once()
        with self._lock:
            self.schedules.append(schedule)
        schedule.start(run_now=False)

    def _rotator_clock(self) -> SimulatedClock | ReplayClock:
        behind_s = self.options.rotator_replay_s
        if behind_s is None:
            return SimulatedClock(speed=self.options.rotator_clock_speed)
        if behind_s <= 0:
            raise ValueError(f"rotator_replay_s must be above 0, got {behind_s}")
        return ReplayClock(
            start_ms=int((time.time() - behind_s) * 1000),
            pace_s=self.options.rotator_replay_pace_s,
            settle=self._ingest_settled,
        )

    def _ingest_settled(self, timeout_s: float = 30.0) -> bool:
        """Wait until ingest has taken everything published so far (the replay moves on only then), its
        batching window cut short: seconds of it are many minutes of the replayed clock."""
        ingest = self.mappings.named("ingest")
        return ingest.wait_until_caught_up(timeout_s, flush=True) if ingest is not None else True

    def _queue(self, url: str) -> FailureDestination:
        sqs = self.client("sqs")
        return lambda message: sqs.send_message(QueueUrl=url, MessageBody=json.dumps(message))

    # -- plug points -------------------------------------------------------------------

    def serve_api(self, function: LocalFunction) -> str:
        """Serve the REST API stage with ``function`` behind it; return the base URL (``.../<stage>``)."""
        if self.api is not None:
            raise RuntimeError("the REST API is already served")
        self.api = RestApi(function.invoke, stage=self.config.api_stage, port=self.options.api_port)
        return self.api.start()

    def schedule(
        self,
        function: LocalFunction,
        *,
        every_s: float,
        clock: SimulatedClock | None = None,
        event: Callable[[int], dict[str, Any]] = empty_event,
        run_now: bool = True,
    ) -> Schedule:
        """Invoke ``function`` every ``every_s`` simulated seconds of ``clock``, the first time now
        (in the schedule's thread) unless ``run_now`` is False."""
        schedule = Schedule(
            function.name, function.invoke, every_s=every_s, clock=clock or SimulatedClock(), event=event
        )
        with self._lock:
            self.schedules.append(schedule)
        schedule.start(run_now=run_now)
        return schedule

    # -- what the running system offers ----------------------------------------------

    @property
    def resources(self) -> Resources:
        return _running(self._resources)

    @property
    def mappings(self) -> StreamMappings:
        return _running(self._mappings)

    @property
    def endpoint_url(self) -> str:
        return self._moto.endpoint_url

    @property
    def console(self) -> TextIO:
        """Where the command's own output goes: the stdout from before the system started when the
        functions' output is routed to a log file, else stdout."""
        return self._router.console if self._router is not None else sys.stdout

    @property
    def endpoints(self) -> Endpoints:
        r = self.resources
        return Endpoints(
            region=self.options.region,
            endpoint_url=self.endpoint_url,
            stream_name=r.names.stream,
            stream_arn=r.stream_arn,
            readings_tables=self.readings_tables(),
            control_table=r.names.control_table,
            rejects_queue_url=r.rejects_queue_url,
            ingest_failures_queue_url=r.ingest_failures_queue_url,
            alarm_topic_arn=r.alarm_topic_arn,
            api_url=self.api.base_url if self.api is not None else None,
            hotkeys_failures_queue_url=r.hotkeys_failures_queue_url,
            lambda_endpoint_url=self.lambda_invoke.url,
            functions=tuple(self.functions.loaded),
        )

    def client(self, service: str, *, max_attempts: int = 3) -> Any:
        """A boto3 client for the embedded moto server (never another endpoint)."""
        return local_client(service, self.endpoint_url, self.options.region, max_attempts=max_attempts)

    def readings_tables(self) -> tuple[str, ...]:
        """The readings tables that exist now (the fixed one, or every period's)."""
        return existing_readings_tables(self.client("dynamodb"), self.config)

    def schedule_of(self, function: LambdaFunction) -> Schedule | None:
        """The schedule of one of the app's functions (None when it is not running)."""
        name = self.functions.name(function)
        return next((s for s in self.schedules if s.name == name), None)

    def wait_until_idle(self, timeout_s: float, *, flush: bool = False) -> bool:
        """True once every mapping has caught up with everything written before the call, in the order
        the data flows; False on timeout. ``flush``: batching windows cut short, once nothing more is written."""
        return self.mappings.wait_until_idle(timeout_s, flush=flush)

    def stats(self) -> dict[str, Any]:
        return {
            **self.functions.stats(),
            "event_source_mappings": self.mappings.snapshot(),
            "api_requests": len(self.api.latencies_ms) if self.api is not None else 0,
            "schedules": {s.name: {"runs": s.runs, "failures": s.failures} for s in self.schedules},
        }


def _running(part: T | None) -> T:
    if part is None:
        raise RuntimeError("the system is not running")
    return part
