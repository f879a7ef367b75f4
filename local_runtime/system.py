"""The whole system on one machine: moto, the resources, the handlers and their triggers.

``with LocalSystem(config) as system:`` starts, in order: the function log
router, the embedded moto server, the process environment that points every
AWS client at it, the resources (from the same :class:`AppConfig` the stack
is built from), and the four functions, each with the environment
:meth:`AppConfig.function_environment` builds for the stack (the local values
in a :class:`FunctionWiring`):

* ingest, polling the Kinesis stream;
* query, behind the REST API emulator (``LocalOptions.query_api``);
* the hot-key detector on every readings table's stream, failures to its own
  queue (``LocalOptions.hot_keys``). With a table period and the rotator on,
  the rotator maps each table's stream, as in AWS (:mod:`.lambda_mappings`);
* the rotator on its schedule, with a speed-up clock (``LocalOptions.rotator``;
  only with a table period). It builds the per-period tables, as in AWS (the
  stack creates none); with ``LocalOptions.rotator_replay_s`` its clock starts
  that far in the past and replays the rotator's schedule run by run until it
  meets the wall clock, ingest running on the same clock meanwhile.

Stopping undoes it all in reverse, whatever failed on the way. The plug points
the functions are wired through (:meth:`LocalSystem.load_function`,
:meth:`~LocalSystem.serve_api`, :meth:`~LocalSystem.consume_table_streams`,
:meth:`~LocalSystem.schedule`) stay public for tests and other handlers.
"""

from __future__ import annotations

import logging
import math
import sys
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TextIO

import boto3
from botocore.config import Config

from adapters.clients import reset_clients
from adapters.occupancy import OccupancyStore
from adapters.settings import CommonSettings
from infra.config import METRICS_NAMESPACE, AppConfig, FunctionWiring, LambdaFunction
from local_runtime.api_gateway import RestApi
from local_runtime.environment import assert_loopback, aws_environment, patched_environ
from local_runtime.event_source_mapping import EventSourceMapping, FailureDestination, MappingConfig, SqsDestination
from local_runtime.faults import FaultInjectingDynamoDB, LocalFaults
from local_runtime.function_logs import FunctionLogRouter
from local_runtime.functions import FunctionSpec, InvocationFaults, InvocationGate, LocalFunction
from local_runtime.moto_server import EmbeddedMoto
from local_runtime.resources import Provisioner, ResourceNames, Resources
from local_runtime.scheduler import ReplayClock, Schedule, SimulatedClock, empty_event, now_event
from local_runtime.stream_sources import DynamoDBStreamSource, KinesisSource, StartingPosition
from rotator.settings import RotatorSettings

if TYPE_CHECKING:
    from local_runtime.lambda_mappings import LocalMappings

_log = logging.getLogger(__name__)

INGEST_HANDLER = LambdaFunction.INGEST.handler


@dataclass(frozen=True, slots=True)
class LocalOptions:
    """How the local system runs (the AWS-side settings come from :class:`AppConfig`)."""

    region: str = "eu-west-1"
    moto_port: int = 0
    api_port: int = 0
    faults: LocalFaults = field(default_factory=LocalFaults)
    #: Shards of the Kinesis stream; None: as configured (moto gives an on-demand stream 4).
    kinesis_shards: int | None = None
    #: The ingest mapping's batching window; None: ``ingest_batching_window_s`` of the config.
    batching_window_s: float | None = None
    poll_interval_s: float = 0.25
    ingest_timeout_s: float = 120.0
    ingest_memory_mb: int = 1024
    #: Invocations running at once over every function (they share Powertools' module state).
    concurrency: int = 1
    #: A file for the functions' stdout (logs, EMF metrics) while the system runs, as CloudWatch Logs
    #: holds them; ``sys.stdout`` is routed there and :attr:`LocalSystem.console` is the terminal.
    #: None leaves stdout alone.
    function_log: Path | None = None
    function_log_level: str = "INFO"
    #: Extra environment for the ingest function (e.g. ``{"WRITE_CONCURRENCY": "4"}``), on top of
    #: what :meth:`AppConfig.function_environment` gives it; likewise for the other functions.
    ingest_environment: Mapping[str, str] = field(default_factory=dict)
    query_environment: Mapping[str, str] = field(default_factory=dict)
    hotkeys_environment: Mapping[str, str] = field(default_factory=dict)
    rotator_environment: Mapping[str, str] = field(default_factory=dict)
    #: How often per-period readings tables are looked for (to follow their streams).
    table_discovery_s: float = 5.0
    #: Serve the query API: the query function behind the REST API emulator.
    query_api: bool = True
    #: Run the hot-key detector on the readings tables' streams.
    hot_keys: bool = True
    #: Run the rotator on its schedule (only with a table_period: otherwise there is nothing to rotate).
    rotator: bool = True
    #: How many times faster than the wall clock the rotator's clock runs. At 1 the schedule
    #: invokes it with ``{}`` (a live run, as EventBridge Scheduler does); faster, with the
    #: simulated time as ``{"now": ...}`` and ``ALLOW_NOW_OVERRIDE=true`` (so too when it replays).
    rotator_clock_speed: float = 1.0
    #: The rotator's period in simulated seconds; None: the stack's schedule (15 min or 1 h).
    rotator_every_s: float | None = None
    #: Start the rotator's clock this many seconds in the past and replay its schedule run by run
    #: (each at least ``rotator_replay_pace_s`` of real time) until it meets the wall clock, then go
    #: on with the wall clock (:class:`~local_runtime.scheduler.ReplayClock`). Ingest runs on the
    #: same clock: it must take the replayed periods' readings as on time, and refuse what the
    #: rotator has closed. :attr:`LocalSystem.clock` timestamps such readings.
    rotator_replay_s: float | None = None
    rotator_replay_pace_s: float = 0.5
    #: Maintain rollups: ingest marks, the rollup function runs every ``rollup_every_s`` (wall clock),
    #: the query function reads them. Off: every function runs as with ``rollups: null``.
    rollups: bool = False
    rollup_every_s: float = 60.0
    #: On top of the stack's environment; ROLLUP_SETTLE (the stack's: ingest timeout + 60 s) is here
    #: ``ingest_timeout_s`` + 5 s by default: local invocations run in this process, on this clock.
    rollup_environment: Mapping[str, str] = field(default_factory=dict)
    #: Run the rollup function this far ahead of the wall clock: compressed time for tests and the
    #: demo, so the minute just ingested is already closed (0: the real schedule's behaviour).
    rollup_ahead_s: float = 0.0
    #: The cursor-signing key stored in the local Secrets Manager; None: a random one per start.
    cursor_secret: str | None = None


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
    #: The functions running, by their stack name (``<stack_name>-<function>``).
    functions: tuple[str, ...] = ()


class LocalSystem:
    """The running system. Not reusable: start it once, stop it once."""

    def __init__(
        self,
        config: AppConfig,
        options: LocalOptions | None = None,
        *,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.config = config
        self.options = options or LocalOptions()
        self._now_ms = now_ms
        self._exit = ExitStack()
        self._moto = EmbeddedMoto(self.options.moto_port)
        self._gate = InvocationGate(self.options.concurrency)
        faults = self.options.faults
        self._invocation_faults = (
            InvocationFaults(faults.invocation_error_fraction, faults.seed)
            if faults.invocation_error_fraction
            else None
        )
        self.write_faults: list[FaultInjectingDynamoDB] = []
        self.functions: dict[str, LocalFunction] = {}
        self.mappings: list[EventSourceMapping] = []
        self.schedules: list[Schedule] = []
        self._followers: list[_TableStreamFollower] = []
        self.lambda_mappings: LocalMappings | None = None
        #: The rotator's clock (None without the rotator); ingest's too when it replays.
        self.clock: SimulatedClock | ReplayClock | None = None
        #: Every rotator run that returned: ``{"now_ms": ..., "summary": <its summary>}``, in order.
        self.rotations: list[dict[str, Any]] = []
        self._api: RestApi | None = None
        self._resources: Resources | None = None
        self._endpoint_url: str | None = None
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
        options = self.options
        if options.function_log is not None:
            options.function_log.parent.mkdir(parents=True, exist_ok=True)
            sink: TextIO = self._exit.enter_context(options.function_log.open("a", encoding="utf-8"))
            router = FunctionLogRouter(sink)
            router.install()
            self._router = router
            self._exit.callback(router.uninstall)

        endpoint = self._moto.start()
        self._exit.callback(self._moto.stop)
        self._endpoint_url = endpoint

        process_env: dict[str, str | None] = {
            **aws_environment(endpoint, options.region),
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": options.function_log_level,
            **CommonSettings.render(metrics_namespace=METRICS_NAMESPACE),
        }
        self._exit.enter_context(patched_environ(process_env))
        # Cached clients made before the environment changed would point elsewhere.
        reset_clients()
        self._exit.callback(reset_clients)

        provisioner = Provisioner(
            dynamodb=self.client("dynamodb"),
            kinesis=self.client("kinesis"),
            sqs=self.client("sqs"),
            sns=self.client("sns"),
            secretsmanager=self.client("secretsmanager"),
        )
        rotates = options.rotator and self.config.table_period is not None
        names = ResourceNames.for_config(self.config, self._now_ms())
        if rotates:
            # The rotator builds every per-period table, as in AWS (the stack makes none).
            names = replace(names, readings_tables=())
            if options.rotator_replay_s is not None:
                # Made now: ingest runs on it. It stands still until the rotator's schedule moves it.
                self.clock = self._rotator_clock()
        self._resources = provisioner.provision(
            self.config, names, kinesis_shards=options.kinesis_shards, cursor_secret=options.cursor_secret
        )
        # A fresh local stack holds no reading written without its occupancy record, so reads
        # may prune from the start. (In AWS the first ingest batch sets the marker about 20 min
        # ahead: containers of the previous code may still be writing; docs/query.md.)
        OccupancyStore(self.client("dynamodb"), names.control_table, self.config.storage.table_prefix).mark_since(0)
        export_bucket = self.config.rotation.export_bucket if rotates else None
        if export_bucket is not None:
            # The stack does not create the export bucket (an operator names theirs); locally we do.
            self.client("s3").create_bucket(
                Bucket=export_bucket, CreateBucketConfiguration={"LocationConstraint": options.region}
            )
        self._exit.callback(self._stop_components)

        self._start_ingest()
        if options.query_api:
            self._start_query()
        if options.hot_keys:
            # With per-period tables and the rotator running, the rotator maps each table's
            # stream (as in AWS); otherwise the one mapping of the stack, on every table.
            self._start_hot_keys(follow_tables=not rotates)
        if rotates:
            self._start_rotator()
        if options.rollups and self.config.context.rollups:
            self._start_rollups()

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
            schedule.stop(self.options.ingest_timeout_s)
        if self._api is not None:
            self._api.stop()
        for follower in self._followers:
            follower.stop()
        for mapping in self.mappings:
            mapping.stop(self.options.ingest_timeout_s + 5)
        for function in self.functions.values():
            function.close()

    # -- what the running system offers ----------------------------------------------

    @property
    def resources(self) -> Resources:
        if self._resources is None:
            raise RuntimeError("the system is not running")
        return self._resources

    @property
    def endpoint_url(self) -> str:
        if self._endpoint_url is None:
            raise RuntimeError("the system is not running")
        return self._endpoint_url

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
            api_url=self._api.base_url if self._api is not None else None,
            hotkeys_failures_queue_url=r.hotkeys_failures_queue_url,
            functions=tuple(self.functions),
        )

    def client(self, service: str, *, max_attempts: int = 3) -> Any:
        """A boto3 client for the embedded moto server (never another endpoint)."""
        client = boto3.session.Session().client(
            service,
            endpoint_url=assert_loopback(self.endpoint_url),
            region_name=self.options.region,
            aws_access_key_id="local",
            aws_secret_access_key="local",  # noqa: S106 - moto accepts any credentials
            config=Config(
                retries={"mode": "standard", "max_attempts": max_attempts},
                max_pool_connections=32,
                # Buckets as a path: a loopback IP has no subdomains.
                s3={"addressing_style": "path"},
            ),
        )
        assert_loopback(str(client.meta.endpoint_url))
        return client

    def _rotator_clock(self) -> SimulatedClock | ReplayClock:
        options = self.options
        behind_s = options.rotator_replay_s
        if behind_s is None:
            return SimulatedClock(speed=options.rotator_clock_speed)
        if behind_s <= 0:
            raise ValueError(f"rotator_replay_s must be above 0, got {behind_s}")
        return ReplayClock(
            start_ms=self._now_ms() - int(behind_s * 1000),
            pace_s=options.rotator_replay_pace_s,
            settle=self._ingest_settled,
        )

    def _ingest_settled(self, timeout_s: float = 30.0) -> bool:
        """Wait until ingest has taken everything published so far (the replay moves on only then)."""
        with self._lock:
            ingest = next((m for m in self.mappings if m.name == "ingest"), None)
        return ingest.wait_until_caught_up(timeout_s) if ingest is not None else True

    def readings_tables(self) -> tuple[str, ...]:
        """The readings tables that exist now (the fixed one, or every period's)."""
        names = self.resources.names
        if self.config.storage.readings_table_name is not None:
            return names.readings_tables
        prefix = f"{self.config.storage.table_prefix}-"
        found: list[str] = []
        for page in self.client("dynamodb").get_paginator("list_tables").paginate():
            found.extend(t for t in page.get("TableNames", []) if t.startswith(prefix))
        return tuple(sorted(found))

    @property
    def wiring(self) -> FunctionWiring:
        """The deploy-time values of the functions' environments, as local mode has them: the moto
        queue URL and ARN, topic ARN and Secrets Manager secret ARN, the local function ARN."""
        r = self.resources
        return FunctionWiring(
            rejects_queue_url=r.rejects_queue_url,
            cursor_secret_arn=r.cursor_secret_arn,
            alert_topic_arn=r.alarm_topic_arn,
            hotkeys_function_arn=self.function_arn(LambdaFunction.HOTKEYS),
            hotkeys_failure_destination_arn=r.hotkeys_failures_queue_arn,
        )

    def function_name(self, function: LambdaFunction | str) -> str:
        """The function's name, as the stack names it: ``<stack_name>-<function>``."""
        return f"{self.config.stack_name}-{LambdaFunction(function).value}"

    def function_arn(self, function: LambdaFunction | str) -> str:
        return FunctionSpec(name=self.function_name(function), handler="-", region=self.options.region).arn

    def function_by_arn(self, arn: str) -> LocalFunction | None:
        with self._lock:
            return next((f for f in self.functions.values() if f.spec.arn == arn), None)

    def function_environment(self, function: LambdaFunction | str, **extra: str) -> dict[str, str]:
        """``function``'s environment as the stack builds it (:meth:`AppConfig.function_environment`
        with :attr:`wiring`), plus ``extra``."""
        env = self.config.function_environment(LambdaFunction(function), self.wiring)
        if not self.options.rollups:
            env.pop("ROLLUPS", None)
        env.update(extra)
        return env

    def stats(self) -> dict[str, Any]:
        return {
            "functions": {name: f.stats.as_dict() for name, f in self.functions.items()},
            "event_source_mappings": {m.name: m.snapshot() for m in self.mappings},
            "write_faults": [
                {
                    "calls": w.counters.calls,
                    "throttled": w.counters.throttled,
                    "partial_calls": w.counters.partial_calls,
                    "items_held_back": w.counters.held_back,
                }
                for w in self.write_faults
            ],
            "invocation_errors_injected": self._invocation_faults.injected if self._invocation_faults else 0,
            "api_requests": len(self._api.latencies_ms) if self._api is not None else 0,
            "schedules": {s.name: {"runs": s.runs, "failures": s.failures} for s in self.schedules},
        }

    # -- plug points -------------------------------------------------------------------

    def load_function(self, spec: FunctionSpec, *, inject_errors: bool = True) -> LocalFunction:
        """Import ``spec``'s handler afresh with its environment; invocations share the system's gate
        and (with ``inject_errors``) its injected invocation errors."""
        with self._lock:
            if spec.name in self.functions:
                raise ValueError(f"a function named {spec.name!r} is already loaded")
        function = LocalFunction(
            replace(spec, region=self.options.region),
            gate=self._gate,
            faults=self._invocation_faults if inject_errors else None,
        )
        with self._lock:
            self.functions[spec.name] = function
        return function

    def add_stream_mapping(
        self,
        *,
        name: str,
        source: KinesisSource | DynamoDBStreamSource,
        function: LocalFunction,
        config: MappingConfig,
        destination: FailureDestination | None,
    ) -> EventSourceMapping:
        mapping = EventSourceMapping(
            name=name,
            source=source,
            function=function,
            function_arn=function.spec.arn,
            config=config,
            destination=destination,
        )
        with self._lock:
            self.mappings.append(mapping)
        mapping.start()
        return mapping

    def remove_stream_mapping(self, mapping: EventSourceMapping) -> None:
        """Stop ``mapping`` and forget it (its stream is gone)."""
        mapping.stop(self.options.ingest_timeout_s + 5)
        with self._lock:
            if mapping in self.mappings:
                self.mappings.remove(mapping)

    def serve_api(self, function: LocalFunction) -> str:
        """Serve the REST API stage with ``function`` behind it; return the base URL (``.../<stage>``)."""
        if self._api is not None:
            raise RuntimeError("the REST API is already served")
        self._api = RestApi(function.invoke, stage=self.config.api.stage, port=self.options.api_port)
        return self._api.start()

    @property
    def api(self) -> RestApi | None:
        return self._api

    def consume_table_streams(
        self,
        function: LocalFunction,
        config: MappingConfig,
        *,
        destination: FailureDestination | None = None,
    ) -> None:
        """Invoke ``function`` with the stream of every readings table, including per-period tables
        created later (looked for every ``table_discovery_s``), as the rotator's mappings would."""
        follower = _TableStreamFollower(self, function, config, destination)
        with self._lock:
            self._followers.append(follower)
        follower.start()

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
        schedule = Schedule(function.name, function.invoke, every_s=every_s, clock=clock, event=event)
        with self._lock:
            self.schedules.append(schedule)
        schedule.start(run_now=run_now)
        return schedule

    def wait_until_idle(self, timeout_s: float) -> bool:
        """True once every mapping has caught up with everything written before the call, in the order
        the data flows (the stream first, then the tables' streams it wrote to); False on timeout."""
        deadline = time.monotonic() + timeout_s
        for follower in self._followers:
            follower.discover()
        with self._lock:
            mappings = list(self.mappings)
        # In order, stopping at the first that has not caught up (all() short-circuits).
        return all(mapping.wait_until_caught_up(max(0.0, deadline - time.monotonic())) for mapping in mappings)

    # -- the ingest function -----------------------------------------------------------

    def _start_ingest(self) -> None:
        options = self.options
        resources = self.resources
        env = self.function_environment(LambdaFunction.INGEST, **dict(options.ingest_environment))
        spec = FunctionSpec(
            name=self.function_name(LambdaFunction.INGEST),
            handler=INGEST_HANDLER,
            environment=env,
            timeout_s=options.ingest_timeout_s,
            memory_mb=options.ingest_memory_mb,
            configure=self._configure_ingest if options.faults.writes is not None or self._ingest_clock() else None,
            close=_close_attribute("INGESTOR"),
        )
        function = self.load_function(spec)
        window = options.batching_window_s
        mapping_config = MappingConfig.for_stream(
            self.config.ingest,
            poll_interval_s=options.poll_interval_s,
            **({"batching_window_s": window} if window is not None else {}),
        )
        self.add_stream_mapping(
            name="ingest",
            source=KinesisSource(
                self.client("kinesis"), resources.stream_arn, region=options.region, function_name=function.name
            ),
            function=function,
            config=mapping_config,
            destination=SqsDestination(self.client("sqs"), resources.ingest_failures_queue_url),
        )

    def _ingest_clock(self) -> ReplayClock | None:
        """The clock ingest runs on, when not the wall clock: the rotator's replay clock."""
        return self.clock if isinstance(self.clock, ReplayClock) else None

    def _configure_ingest(self, module: ModuleType) -> None:
        """Rebuild the ingest module's Ingestor with a fault injector around its DynamoDB client
        and/or on the rotator's catch-up clock (``Ingestor.from_settings`` takes both, for this)."""
        from adapters.clients import client  # noqa: PLC0415 - after the environment is set
        from ingest.logic import Ingestor  # noqa: PLC0415

        plan = self.options.faults.writes
        injector = FaultInjectingDynamoDB(client("dynamodb", max_attempts=1), plan) if plan is not None else None
        clock = self._ingest_clock()
        _rebuild(
            module,
            "INGESTOR",
            lambda settings: (
                Ingestor.from_settings(settings, dynamodb=injector, wall_clock_ms=clock.now_ms)
                if clock is not None
                else Ingestor.from_settings(settings, dynamodb=injector)
            ),
        )
        if injector is not None:
            self.write_faults.append(injector)

    # -- the query API, the hot-key detector, the rotator --------------------------------------

    def _spec(self, function: LambdaFunction, extra: Mapping[str, str], **kwargs: Any) -> FunctionSpec:
        sizing = self.config.lambdas.sizing(function)
        return FunctionSpec(
            name=self.function_name(function),
            handler=function.handler,
            environment=self.function_environment(function, **dict(extra)),
            timeout_s=float(sizing.timeout_s),
            memory_mb=sizing.memory_mb,
            **kwargs,
        )

    def _start_query(self) -> None:
        # No injected invocation errors here: they exist to make stream batches redeliver, and an
        # API client would only see API Gateway's 502 for them.
        function = self.load_function(
            self._spec(LambdaFunction.QUERY, self.options.query_environment), inject_errors=False
        )
        self.serve_api(function)

    def _start_hot_keys(self, *, follow_tables: bool) -> None:
        function = self.load_function(
            self._spec(LambdaFunction.HOTKEYS, self.options.hotkeys_environment, close=_close_attribute("MONITOR"))
        )
        if follow_tables:
            self.consume_table_streams(
                function,
                MappingConfig.for_stream(self.config.hot_keys, poll_interval_s=self.options.poll_interval_s),
                destination=SqsDestination(self.client("sqs"), self.resources.hotkeys_failures_queue_url),
            )

    def _start_rotator(self) -> None:
        from local_runtime.lambda_mappings import LocalMappings  # noqa: PLC0415 - imports the rotator's code

        options = self.options
        sped_up = options.rotator_clock_speed != 1.0 or options.rotator_replay_s is not None
        mappings = LocalMappings(self, destination_for=self._destination_for)
        self.lambda_mappings = mappings
        extra = {**RotatorSettings.render(allow_now_override=sped_up or None), **options.rotator_environment}
        function = self.load_function(
            self._spec(LambdaFunction.ROTATOR, extra, configure=_rotator_on_local_mappings(mappings))
        )
        every_s = options.rotator_every_s or self.config.rotation_interval_minutes() * 60.0
        # A speed-up clock starts with the first run, not before the rest of the system started.
        clock = self.clock or self._rotator_clock()
        self.clock = clock
        # The first run happens here, before start() returns: the tables (and their stream mappings)
        # it makes exist by the time anyone publishes. The schedule then runs it every period.
        schedule = Schedule(
            function.name,
            function.invoke,
            every_s=every_s,
            clock=clock,
            event=now_event if sped_up else empty_event,
            on_result=self._record_rotation,
        )
        schedule.run_once()
        with self._lock:
            self.schedules.append(schedule)
        schedule.start(run_now=False)

    def _start_rollups(self) -> None:
        options = self.options
        settle = {"ROLLUP_SETTLE": f"{math.ceil(options.ingest_timeout_s) + 5}s"}
        function = self.load_function(
            self._spec(
                LambdaFunction.ROLLUP,
                {**settle, **options.rollup_environment},
                close=_close_attribute("RUNNER"),
                configure=_rollups_ahead(options.rollup_ahead_s) if options.rollup_ahead_s else None,
            )
        )
        # The first run one period after the start, as a new schedule's in AWS.
        self.schedule(function, every_s=options.rollup_every_s, run_now=False)

    def rollup_schedule(self) -> Schedule | None:
        """The rollup function's schedule (None when rollups are off)."""
        name = self.function_name(LambdaFunction.ROLLUP)
        return next((s for s in self.schedules if s.name == name), None)

    def _record_rotation(self, now_ms: int, result: Any) -> None:
        with self._lock:
            self.rotations.append({"now_ms": now_ms, "summary": result})

    def _destination_for(self, arn: str) -> FailureDestination | None:
        """The local queue an on-failure destination ARN names (the rotator's mapping requests)."""
        r = self.resources
        queues = {
            r.hotkeys_failures_queue_arn: r.hotkeys_failures_queue_url,
            r.ingest_failures_queue_arn: r.ingest_failures_queue_url,
        }
        url = queues.get(arn)
        return SqsDestination(self.client("sqs"), url) if url else None


def _close_attribute(name: str) -> Callable[[ModuleType], None]:
    """A ``close`` hook that closes the module-level object ``name`` (a handler's ingestor or monitor)."""

    def close(module: ModuleType) -> None:
        target = getattr(module, name, None)
        closer = getattr(target, "close", None)
        if callable(closer):
            closer()

    return close


def _rebuild(module: ModuleType, attribute: str, build: Callable[[Any], Any]) -> None:
    """Replace the handler module's ``attribute`` (its logic object, made at import from its ``SETTINGS``)
    with ``build(SETTINGS)``, closing the one it replaces."""
    for name in ("SETTINGS", attribute):
        if not hasattr(module, name):
            raise RuntimeError(f"{module.__name__} has no {name}: cannot rebuild its {attribute}")
    _close_attribute(attribute)(module)
    setattr(module, attribute, build(module.SETTINGS))


def _rollups_ahead(ahead_s: float) -> Callable[[ModuleType], None]:
    """Rebuild the rollup module's ``RUNNER`` on a clock ``ahead_s`` ahead of the wall clock."""

    def configure(module: ModuleType) -> None:
        from rollup.logic import RollupRunner  # noqa: PLC0415 - after the environment is set

        ahead_ms = int(ahead_s * 1000)
        _rebuild(
            module,
            "RUNNER",
            lambda settings: RollupRunner.from_settings(
                settings, clock_ms=lambda: time.time_ns() // 1_000_000 + ahead_ms
            ),
        )

    return configure


def _rotator_on_local_mappings(mappings: LocalMappings) -> Callable[[ModuleType], None]:
    """Rebuild the rotator module's ``ROTATOR`` with its stream mappings on :class:`LocalMappings`
    (moto's Lambda cannot hold them; see :mod:`local_runtime.lambda_mappings`). Tables and alarms
    stay on moto's DynamoDB and CloudWatch."""

    def configure(module: ModuleType) -> None:
        from rotator.logic import Rotator  # noqa: PLC0415 - after the environment is set

        def build(settings: Any) -> Rotator:
            rotator = Rotator.from_settings(settings)
            if rotator.mappings is not None:
                rotator.mappings = mappings
            return rotator

        _rebuild(module, "ROTATOR", build)

    return configure


class _TableStreamFollower:
    """Keeps one DynamoDB stream mapping per readings table, as tables come and go."""

    def __init__(
        self,
        system: LocalSystem,
        function: LocalFunction,
        config: MappingConfig,
        destination: FailureDestination | None,
    ) -> None:
        self._system = system
        self._function = function
        self._config = config
        self._destination = destination
        self._mappings: dict[str, EventSourceMapping] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{function.name}-tables", daemon=True)
        self._lock = threading.Lock()
        self._dynamodb = system.client("dynamodb")
        self._streams = system.client("dynamodbstreams")

    def start(self) -> None:
        self.discover()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def discover(self) -> None:
        with self._lock:
            tables = set(self._system.readings_tables())
            for table in sorted(tables - set(self._mappings)):
                description = self._dynamodb.describe_table(TableName=table)["Table"]
                arn = description.get("LatestStreamArn")
                if not arn:
                    continue
                self._mappings[table] = self._system.add_stream_mapping(
                    name=f"{self._function.name}:{table}",
                    source=DynamoDBStreamSource(self._streams, str(arn), region=self._system.options.region),
                    function=self._function,
                    config=replace(self._config, starting_position=StartingPosition.TRIM_HORIZON),
                    destination=self._destination,
                )
            for table in sorted(set(self._mappings) - tables):
                # A dropped table's stream ends; its mapping stops and is no longer waited on.
                self._system.remove_stream_mapping(self._mappings.pop(table))

    def _run(self) -> None:
        while not self._stop.wait(self._system.options.table_discovery_s):
            try:
                self.discover()
            except Exception:  # a failed look must not end the follower; the next one retries
                _log.exception("looking for readings tables failed")
