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
from typing import Self

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from adapters.settings import refusal
from adapters.table_builds import TABLES_PER_REQUEST
from keydesign import parse_timestamp, shown_name

#: Table names one build request may carry (what ingest sends at most).
MAX_BUILDS = TABLES_PER_REQUEST
# The keys every EventBridge event carries; "detail" holds the rule's payload.
_ENVELOPE = frozenset({"version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail"})


class InvalidRequest(ValueError):  # noqa: N818 - reads as the condition, like keydesign.InvalidInput
    """The event cannot be acted on; ``field`` names the key."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        super().__init__(f"{field}: {reason}")


class RotationRequest(BaseModel):
    """One run: a dry run or not, at ``now`` (epoch ms; None: the real clock), building ``build`` (empty:
    a scheduled run of every table)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    dry_run: bool = False
    now: int | None = None
    build: tuple[str, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _options(cls, event: object) -> object:
        if isinstance(event, Mapping) and event.keys() >= _ENVELOPE:  # a rule's envelope: its detail
            event = event["detail"]
            if event is not None and not isinstance(event, Mapping):
                raise InvalidRequest("detail", f"must be a JSON object of rotator options, got {type(event).__name__}")
        # Named here rather than by extra="forbid": pydantic cannot name a key that is not valid text.
        unknown = sorted(str(key) for key in event if key not in cls.model_fields) if isinstance(event, Mapping) else []
        if unknown:
            options = ", ".join(cls.model_fields)
            raise InvalidRequest(
                shown_name(unknown[0]), f"is not a rotator option (send {{}} for a scheduled run; options: {options})"
            )
        return {} if event is None else event

    @field_validator("now", mode="before")
    @classmethod
    def _now(cls, value: object) -> object:
        return parse_timestamp(value, "now") if isinstance(value, str) else value

    @field_validator("build", mode="before")
    @classmethod
    def _build(cls, value: object) -> tuple[str, ...]:
        if not isinstance(value, list | tuple) or not value or not all(isinstance(n, str) and n for n in value):
            raise InvalidRequest("build", "must be a non-empty list of table names")
        if len(value) > MAX_BUILDS:
            raise InvalidRequest("build", f"names {len(value)} tables; at most {MAX_BUILDS} a request")
        return tuple(dict.fromkeys(value))

    @classmethod
    def from_event(cls, event: object, *, dry_run_default: bool, allow_now_override: bool) -> Self:
        try:
            request = cls.model_validate(event)
        except ValidationError as exc:
            raise _refusal(exc, event) from None
        dry_run = dry_run_default or request.dry_run
        if request.now is not None and not dry_run and not allow_now_override:
            raise InvalidRequest(
                "now", "a live run uses the real clock; send dry_run true to see what a run at that time would do"
            )
        return request.model_copy(update={"dry_run": dry_run})


def _refusal(exc: ValidationError, event: object) -> InvalidRequest:
    if not isinstance(event, Mapping):  # the only event pydantic refuses as a whole
        return InvalidRequest("event", f"must be a JSON object, got {type(event).__name__}")
    return refusal(exc, InvalidRequest)
