"""How the local system runs: :class:`LocalOptions` (the AWS side, sizes and timeouts included, comes from
the stack's :class:`infra.config.Context`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from infra.config import LambdaFunction
from local_runtime.faults import LocalFaults


@dataclass(frozen=True, slots=True)
class LocalOptions:
    """How the local system runs (the AWS side, sizes and timeouts included, comes from :class:`Context`)."""

    region: str = "eu-west-1"
    moto_port: int = 0
    api_port: int = 0
    faults: LocalFaults = field(default_factory=LocalFaults)
    #: How long an idle shard waits before it is read again.
    poll_interval_s: float = 0.25
    #: A file for the functions' stdout (logs, EMF metrics) while the system runs, as CloudWatch Logs
    #: holds them; ``sys.stdout`` is routed there and :attr:`LocalSystem.console` is the terminal.
    #: None leaves stdout alone.
    function_log: Path | None = None
    #: Variables on top of a function's stack environment, e.g. the demo's ``HOT_WINDOW``.
    environment: Mapping[LambdaFunction, Mapping[str, str]] = field(default_factory=dict)
    #: The functions besides ingest. The rotator runs only with a table_period (else there is nothing
    #: to rotate). Rollups off: every function runs as with ``rollups: null``.
    query_api: bool = True
    hot_keys: bool = True
    rotator: bool = True
    rollups: bool = False
    #: The rotator's clock runs this many times faster than the wall clock; or it starts
    #: ``rotator_replay_s`` back and replays its schedule run by run (each at least
    #: ``rotator_replay_pace_s`` of real time) until it meets the wall clock, ingest on the same
    #: clock meanwhile (:class:`~local_runtime.scheduler.ReplayClock`). Either way its event carries
    #: the simulated time (``{"now": ...}``, with ``ALLOW_NOW_OVERRIDE=true``).
    rotator_clock_speed: float = 1.0
    rotator_replay_s: float | None = None
    rotator_replay_pace_s: float = 0.5
    #: The rollup function runs every ``rollup_every_s`` of the wall clock, the first time one period
    #: after the start, on a clock ``rollup_ahead_s`` ahead of it (compressed time: the minute just
    #: ingested is already closed; 0 is the real schedule's behaviour).
    rollup_every_s: float = 60.0
    rollup_ahead_s: float = 0.0
    #: The compaction function runs (with the write tier on) every ``compaction_every_s`` of the wall
    #: clock (None: the stack's ``compaction_every_minutes``), the first time one period after the
    #: start, on a clock ``compaction_ahead_s`` ahead of it (compressed time: an hour settles sooner).
    #: Ahead, it may compact an hour ingest still writes to: only once publishing has stopped.
    compaction: bool = False
    compaction_every_s: float | None = None
    compaction_ahead_s: float = 0.0
    #: The cursor-signing key stored in the local Secrets Manager; None: a random one per start.
    cursor_secret: str | None = None
