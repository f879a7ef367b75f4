"""Settings every handler shares, and the base every function's settings model is built on.

Each function's settings are one pydantic model (``ingest.settings.IngestSettings``
and so on) whose fields are its environment variables: a field's alias is the
variable's name, written there and nowhere else. :meth:`EnvSettings.from_env`
parses the environment at cold start; :meth:`EnvSettings.render` writes one,
which is how the stack and the local runtime build each function's
environment (``infra.config.Context.function_environment``, which parses what
it renders with the same model, so a configuration the function would refuse
fails at synthesis). A missing or malformed variable raises
:class:`SettingsError` naming it, so a misconfigured function fails its first
invocation loudly instead of writing to the wrong place.

A field is named as the ``cdk.json`` key it comes from (``infra.config.Context``
uses the same Python names); every variable is either rendered by the stack or
one of :data:`LOCAL_ONLY`. Rules between two variables are written here, in
the model that reads both, and nowhere else.

Conventions, the same for every function: a variable set to an empty string is
unset; durations are ``90s``, ``15m``, ``2h``, ``30d``; flags are ``true`` or
``false`` (any case) and nothing else.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from keydesign import KeyDesignError, Layout, parse_duration
from keydesign.periods import format_duration
from keydesign.rollup import Granularities
from keydesign.writetier import MAX_GROUPS, WriteTier

#: MAX_AGE when unset: a long weekend's outage of a store-and-forward device (Friday evening to Monday evening).
DEFAULT_MAX_AGE_MS = 3 * 86_400_000

#: The variables only the local runtime (and tests) set: the stack never renders them, and a deployed
#: function runs with their defaults. Compressed time for the demo (the hot-key windows), a literal
#: cursor key (no Secrets Manager), and a rotator that takes its clock from the event.
LOCAL_ONLY = frozenset(
    {
        "HOT_WINDOW",
        "HOT_WINDOW_GRACE",
        "HOT_CHANGE_MARGIN",
        "HOT_SCALE_DOWN_WINDOWS",
        "CURSOR_SECRET",
        "ALLOW_NOW_OVERRIDE",
    }
)


class SettingsError(ValueError):
    """An environment variable is missing or malformed."""

    def __init__(self, variable: str, reason: str) -> None:
        self.variable = variable
        self.reason = reason
        super().__init__(f"environment variable {variable}: {reason}")


_E = TypeVar("_E", bound=ValueError)

#: pydantic's error types, in the words users see (``{ge}`` and so on: the error's context).
_REASONS = {
    "missing": "is required",
    "int_parsing": "must be a whole number",
    "int_type": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "greater_than_equal": "must be at least {ge:,}",
    "greater_than": "must be above {gt}",
    "less_than_equal": "must be at most {le:,}",
    "less_than": "must be below {lt}",
    "literal_error": "must be one of {expected}",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "string_too_long": "must be at most {max_length} characters",
    "string_type": "must be a single text value",
}


def explain(error: ErrorDetails) -> str:
    """What one pydantic error says, in the words users see: the one translator for ``cdk.json``
    keys (``infra.config``), environment variables (here), the query API's parameters and the
    rotator's event."""
    kind, ctx = error["type"], error.get("ctx", {})
    cause = ctx.get("error")
    if cause is not None:
        return str(getattr(cause, "reason", cause))
    reason = _REASONS[kind].format(**ctx) if kind in _REASONS else str(error["msg"])
    value = error.get("input")
    shown = f"{value:,}" if isinstance(value, int | float) and not isinstance(value, bool) else f"{value!r:.80}"
    return reason if kind == "missing" else f"{reason}, got {shown}"


def refusal(exc: ValidationError, kind: type[_E]) -> _E:
    """``exc``'s first error as a ``kind(name, reason)``: the one a validator raised, or pydantic's, explained."""
    error = exc.errors(include_url=False)[0]
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, kind):
        return cause
    return kind(str(error["loc"][0]) if error["loc"] else "?", explain(error))


def _duration_ms(value: object) -> object:
    if isinstance(value, str):
        try:
            return parse_duration(value, "duration")
        except KeyDesignError as exc:
            raise ValueError(exc.reason) from None
    return value


def _flag(value: object) -> bool:
    text = value.strip().lower() if isinstance(value, str) else value
    if text not in (True, False, "true", "false") or not isinstance(text, bool | str):
        raise ValueError(f"{value!r} is not true or false")
    return text in (True, "true")


#: A duration in milliseconds, read and written as ``90s``, ``15m``, ``2h``, ``30d``.
DurationMs = Annotated[
    int, BeforeValidator(_duration_ms), PlainSerializer(format_duration, return_type=str, when_used="json")
]
#: A flag: ``true`` or ``false``, in any case. The one boolean syntax of every function (and of cdk.json).
Flag = Annotated[
    bool, BeforeValidator(_flag), PlainSerializer(lambda v: "true" if v else "false", return_type=str, when_used="json")
]


def matching(pattern: re.Pattern[str], what: str) -> AfterValidator:
    """Refuse a text ``pattern`` does not match, saying it is not ``what``."""

    def matches(value: str | None) -> str | None:
        if value is not None and not pattern.match(value):
            raise ValueError(f"{value[:80]!r} is not {what}")
        return value

    return AfterValidator(matches)


def env(name: str, default: Any = ..., **constraints: Any) -> Any:
    """A field read from the environment variable ``name`` (``...``: required).

    The docstring under the field says what it is (``infra.config.attribute_docs`` reads it for the docs)."""
    return Field(default, alias=name, validate_default=True, **constraints)


class EnvSettings(BaseModel):
    """A function's settings: each field is an environment variable (its alias)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Field name -> environment variable."""
        return {name: field.alias or name for name, field in cls.model_fields.items()}

    def check(self, condition: bool, field: str, reason: str) -> None:
        """A rule of a model validator: unless ``condition``, ``field``'s variable is refused for ``reason``."""
        if not condition:
            raise self.invalid(field, reason)

    @classmethod
    def invalid(cls, field: str, reason: str) -> SettingsError:
        return SettingsError(cls.variables()[field], reason)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        environ = os.environ if environ is None else environ
        raw = {var: environ[var].strip() for var in cls.variables().values() if environ.get(var, "").strip()}
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise refusal(exc, SettingsError) from None

    @classmethod
    def render(cls, **values: object) -> dict[str, str]:
        """The environment that sets exactly ``values`` (field name -> value; None: left out).

        Not validated here: deploy-time values are CDK tokens in the stack (``Context.function_environment``
        parses the result back)."""
        unknown = set(values) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} has no setting {', '.join(sorted(unknown))}")
        given = {name: value for name, value in values.items() if value is not None}
        dumped = cls.model_construct(None, **given).model_dump(mode="json", by_alias=True, include=set(given))
        return {name: str(value) for name, value in dumped.items()}


class CommonSettings(EnvSettings):
    """What every function reads: the key layout, the shard count, the tables."""

    service_name: str | None = env("POWERTOOLS_SERVICE_NAME", None)
    """Read by Powertools: the service of logs, traces and metrics."""
    metrics_namespace: str | None = env("POWERTOOLS_METRICS_NAMESPACE", None)
    """Read by Powertools: the namespace of every metric."""
    layout_kind: str = env("LAYOUT", "hybrid")
    """Random, calculated or hybrid."""
    shards: int = env("SHARDS", ge=1, le=9_999)
    """Global shard count N before any map change."""
    bucket: str = env("BUCKET", "1h")
    """Bucket granularity, e.g. 15m, 1h, 1d."""
    table_prefix: str = env("TABLE_PREFIX")
    """Readings table, or prefix of per-period ones."""
    table_period: str | None = env("TABLE_PERIOD", None)
    """Hour, day, week, month, or empty."""
    retention_ms: DurationMs = env("RETENTION", "30d", gt=0)
    """How long readings are kept, e.g. 30d."""
    control_table: str | None = env("CONTROL_TABLE", None)
    """Shard-map table; unset: the static map of SHARDS (required by hot keys)."""
    shard_map_cache_ttl_ms: DurationMs = env("SHARD_MAP_CACHE_TTL", "60s")
    """How long a process trusts its copy."""
    grace_ms: DurationMs = env("GRACE", "2h")
    """How long a period's table stays open (full setup, capacity, alarms) after the period ends (rotator)."""
    prebuild_periods: int = env("PREBUILD_PERIODS", 2, ge=1)
    """Tables built ahead of the current period (per-period tables)."""
    max_future_ms: DurationMs = env("MAX_FUTURE", "5m")
    """How far past now an event time may lie (ingest); the hot-key change margin must cover it."""
    max_age: DurationMs | None = env("MAX_AGE", None)
    """How far before now an event time may lie (<= RETENTION; unset: 3d, or RETENTION if shorter). Ingest stores
    such a reading, the rotator keeps (or builds) its table, rollups apply its mark."""
    rollups: str | None = env("ROLLUPS", None)
    """Rollup granularities, finest first, each a multiple of the one before (1m,1h,1d); empty: no rollups."""
    write_tier_groups: int = env("WRITE_TIER_GROUPS", 0, ge=0, le=MAX_GROUPS)
    """Groups of the write tier (keydesign.writetier); 0: no write tier, every reading in its entity's blocks."""

    @model_validator(mode="after")
    def _layout_holds(self) -> Self:
        try:  # built (and kept) here, so one the key design refuses fails at cold start
            _ = self.layout, self.granularities
            if self.granularities is not None and self.write_tier is not None:  # compaction's totals need it
                self.granularities.check_hour_aligned("rollups")
        except KeyDesignError as exc:
            fields = {"layout": "layout_kind", "bucket": "bucket", "table_period": "table_period", "rollups": "rollups"}
            raise self.invalid(fields.get(exc.field, "table_prefix"), exc.reason) from None
        retention = format_duration(self.retention_ms)
        self.check(
            self.max_age is None or self.max_age <= self.retention_ms,
            "max_age",
            f"{format_duration(self.max_age or 0)} is longer than retention ({retention}): such a reading would be "
            "stored already expired, or routed to a table already dropped",
        )
        period = self.layout.table_period
        if period is not None:
            self.check(
                self.retention_ms >= period.nominal_ms,
                "retention_ms",
                f"{retention} is shorter than one {period.name} table period: the table being written would "
                "already be due for dropping",
            )
            self.check(
                self.max_future_ms <= period.nominal_ms,
                "max_future_ms",
                f"{format_duration(self.max_future_ms)} is longer than one {period.name} table period: a reading "
                "that far ahead would be routed to a table the rotator has not built yet",
            )
        return self

    @cached_property
    def granularities(self) -> Granularities | None:
        """The rollup levels, or None when rollups are off."""
        return Granularities.parse(self.rollups, "rollups") if self.rollups else None

    @cached_property
    def write_tier(self) -> WriteTier | None:
        """The write tier, or None when it is off."""
        return WriteTier(self.write_tier_groups) if self.write_tier_groups else None

    @cached_property
    def layout(self) -> Layout:
        return Layout.from_settings(
            kind=self.layout_kind, bucket=self.bucket, table_prefix=self.table_prefix, table_period=self.table_period
        )

    @property
    def max_age_ms(self) -> int:
        """How old a reading may be: MAX_AGE, or :data:`DEFAULT_MAX_AGE_MS` (RETENTION if shorter) when unset."""
        return min(DEFAULT_MAX_AGE_MS, self.retention_ms) if self.max_age is None else self.max_age
