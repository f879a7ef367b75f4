"""The rotator's event: what EventBridge Scheduler (or an operator) asks for.

The schedule's payload is ``{}``; an operator or a test may send
``{"dry_run": true, "now": "2026-11-22T23:59:59Z"}``. Unknown keys are
refused rather than ignored: ``{"dryrun": true}`` must not become a live run.

Ingest sends ``{"build": ["readings-2026-11-20-03", ...]}`` (asynchronously,
``adapters.table_builds``) when a reading up to ``MAX_AGE`` old has no table:
a *build* run creates and sets up only those tables, and only those a reading
can still be admitted to (:meth:`rotator.logic.Rotator.build`); at most
:data:`MAX_BUILDS` names, so the run stays bounded.

An EventBridge *rule* (rather than Scheduler) wraps its payload in an
envelope (``version``, ``id``, ``detail-type``, ``source``, ``account``,
``time``, ``region``, ``resources``, ``detail``). Such an event is a scheduled
run whose options are its ``detail`` (``{}`` for a rule's schedule); the
envelope's ``time`` is not taken as ``now``: a live run uses the real clock.

Two rules keep an event from doing harm:

* ``DRY_RUN=true`` in the environment cannot be turned off by an event;
* a live run uses the real clock. An event's ``now`` is honoured only in a dry
  run, or when ``ALLOW_NOW_OVERRIDE=true`` (tests, the local runtime): a
  ``now`` in 2030 would otherwise make every table look expired.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from adapters.table_builds import TABLES_PER_REQUEST
from keydesign import InvalidInput, parse_timestamp, shown_name

_KEYS = frozenset({"dry_run", "now", "build"})
#: Table names one build request may carry (what ingest sends at most).
MAX_BUILDS = TABLES_PER_REQUEST
# The keys every EventBridge event carries; "detail" holds the rule's payload.
_ENVELOPE = frozenset({"version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"})


class InvalidRequest(ValueError):  # noqa: N818 - reads as the condition, like keydesign.InvalidInput
    """The event cannot be acted on; ``field`` names the key."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True, slots=True)
class RotationRequest:
    dry_run: bool
    now_ms: int | None
    #: Tables to build (a build run), or empty (a scheduled run).
    build: tuple[str, ...] = ()

    @classmethod
    def from_event(cls, event: object, *, dry_run_default: bool, allow_now_override: bool) -> RotationRequest:
        if event is None:
            event = {}
        if not isinstance(event, Mapping):
            raise InvalidRequest("event", f"must be a JSON object, got {type(event).__name__}")
        if event.keys() >= _ENVELOPE:
            event = event["detail"] if event["detail"] is not None else {}
            if not isinstance(event, Mapping):
                raise InvalidRequest("detail", f"must be a JSON object of rotator options, got {type(event).__name__}")
        unknown = sorted(str(key) for key in event if key not in _KEYS)
        if unknown:
            raise InvalidRequest(
                shown_name(unknown[0]),
                f"is not a rotator option (send {{}} for a scheduled run; options: {', '.join(sorted(_KEYS))})",
            )
        raw_dry_run = event.get("dry_run")
        if raw_dry_run is not None and not isinstance(raw_dry_run, bool):
            raise InvalidRequest("dry_run", f"must be true or false, got {raw_dry_run!r}")
        dry_run = dry_run_default or bool(raw_dry_run)
        now_ms: int | None = None
        if event.get("now") is not None:
            try:
                now_ms = parse_timestamp(event["now"], "now")
            except InvalidInput as exc:
                raise InvalidRequest("now", exc.reason) from None
            if not dry_run and not allow_now_override:
                raise InvalidRequest(
                    "now",
                    "a live run uses the real clock; send dry_run true to see what a run at that time would do",
                )
        return cls(dry_run=dry_run, now_ms=now_ms, build=_build(event.get("build")))


def _build(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(name, str) and name for name in value):
        raise InvalidRequest("build", "must be a non-empty list of table names")
    if len(value) > MAX_BUILDS:
        raise InvalidRequest("build", f"names {len(value)} tables; at most {MAX_BUILDS} a request")
    return tuple(dict.fromkeys(value))
