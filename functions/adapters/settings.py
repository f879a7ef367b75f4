"""Settings every handler shares, and the base every function's settings model is built on.

Each function's settings are one pydantic model (``ingest.settings.IngestSettings``
and so on) whose fields are its environment variables: a field's alias is the
variable's name, written there and nowhere else. :meth:`EnvSettings.from_env`
parses the environment at cold start; :meth:`EnvSettings.render` writes one,
which is how the stack and the local runtime build each function's
environment. A missing or malformed variable raises :class:`SettingsError`
naming it, so a misconfigured function fails its first invocation loudly
instead of writing to the wrong place. ``docs/configuration.md`` lists every
variable with its default; a test keeps it equal to the models.

Conventions, the same for every function: a variable set to an empty string is
unset; durations are ``90s``, ``15m``, ``2h``, ``30d``; flags are ``true`` or
``false`` (any case) and nothing else.

``PREBUILD_PERIODS`` and ``MAX_AGE`` are read by ingest and the rotator under
the same names, so ingest never writes to a table the rotator has not built or
has started to retire; the rollup function applies late marks up to ``MAX_AGE``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Annotated, Any, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from keydesign import KeyDesignError, Layout, parse_duration
from keydesign.periods import format_duration
from keydesign.rollup import Granularities

View = TypeVar("View")

#: MAX_AGE when unset: a long weekend's outage of a store-and-forward device (Friday evening to Monday evening).
DEFAULT_MAX_AGE_MS = 3 * 86_400_000


class SettingsError(ValueError):
    """An environment variable is missing or malformed."""

    def __init__(self, variable: str, reason: str) -> None:
        self.variable = variable
        self.reason = reason
        super().__init__(f"environment variable {variable}: {reason}")


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


def deadline_margin(default_ms: int, most_ms: int) -> Any:
    """``DEADLINE_MARGIN_MS``, read by the functions that stop early (ingest, rotator) with their own bounds."""
    return env(
        "DEADLINE_MARGIN_MS", default_ms, ge=0, le=most_ms, description="Time (ms) kept back from the Lambda timeout."
    )


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

    def view(self, cls: type[View], prefix: str = "") -> View:
        """The dataclass ``cls`` filled from this model's fields of the same names (after ``prefix``)."""
        return cls(**{f.name: getattr(self, prefix + f.name) for f in dataclasses.fields(cls)})  # type: ignore[arg-type]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        environ = os.environ if environ is None else environ
        raw = {var: environ[var].strip() for var in cls.variables().values() if environ.get(var, "").strip()}
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            raise _settings_error(cls, exc) from None

    @classmethod
    def render(cls, **values: object) -> dict[str, str]:
        """The environment that sets exactly ``values`` (field name -> value; None: left out).

        Not validated here: deploy-time values are CDK tokens in the stack. The
        stack's and the local runtime's environments are parsed back by tests.
        """
        unknown = set(values) - set(cls.model_fields)
        if unknown:
            raise TypeError(f"{cls.__name__} has no setting {', '.join(sorted(unknown))}")
        given = {name: value for name, value in values.items() if value is not None}
        dumped = cls.model_construct(None, **given).model_dump(mode="json", by_alias=True, include=set(given))
        return {name: str(value) for name, value in dumped.items()}


def _settings_error(model: type[BaseModel], exc: ValidationError) -> SettingsError:
    error = exc.errors(include_url=False)[0]
    variable = str(error["loc"][0]) if error["loc"] else "?"
    field = next((f for f in model.model_fields.values() if f.alias == variable), None)
    kind, value = error["type"], error.get("input")
    if kind == "missing":
        return SettingsError(variable, "is required")
    if kind in ("int_parsing", "int_from_float"):
        return SettingsError(variable, f"{value!r} is not a whole number")
    if kind == "float_parsing":
        return SettingsError(variable, f"{value!r} is not a number")
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than") and field is not None:
        low = next((getattr(m, a) for m in field.metadata for a in ("ge", "gt") if hasattr(m, a)), None)
        high = next((getattr(m, a) for m in field.metadata for a in ("le", "lt") if hasattr(m, a)), None)
        if low is not None and high is not None:
            return SettingsError(variable, f"{value} is outside {low}..{high}")
        return SettingsError(variable, f"{value} must be {'above' if kind == 'greater_than' else 'at least'} {low}")
    if kind == "literal_error":
        return SettingsError(variable, f"{value!r} is not {error['ctx']['expected']}")
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, SettingsError):
        return cause
    return SettingsError(variable, str(cause) if cause is not None else error["msg"])


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
    retention_ms: DurationMs = env("RETENTION", "30d")
    """How long readings are kept, e.g. 30d."""
    readings_table: str | None = env("READINGS_TABLE", None)
    """The fixed readings table (informational: functions derive it from TABLE_PREFIX)."""
    control_table: str | None = env("CONTROL_TABLE", None)
    """Shard-map table; unset: the static map of SHARDS (required by hot keys)."""
    shard_map_cache_ttl_ms: DurationMs = env("SHARD_MAP_CACHE_TTL", "60s")
    """How long a process trusts its copy."""
    grace_ms: DurationMs = env("GRACE", "2h")
    """How long a period's table stays open (full setup, capacity, alarms) after the period ends (rotator)."""
    prebuild_periods: int = env("PREBUILD_PERIODS", 2, ge=1, le=366)
    """Tables built ahead of the current period (per-period tables)."""
    max_future_ms: DurationMs = env("MAX_FUTURE", "5m")
    """How far past now an event time may lie (ingest); the hot-key change margin must cover it."""
    max_age: DurationMs | None = env("MAX_AGE", None)
    """How far before now an event time may lie (<= RETENTION; unset: 3d, or RETENTION if shorter). Ingest stores
    such a reading, the rotator keeps (or builds) its table, rollups apply its mark."""
    rollups: str | None = env("ROLLUPS", None)
    """Rollup granularities, finest first, each a multiple of the one before (1m,1h,1d); empty: no rollups."""
    _layout: Layout = PrivateAttr()
    _granularities: Granularities | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _layout_holds(self) -> Self:
        try:
            layout = Layout.from_settings(
                kind=self.layout_kind,
                bucket=self.bucket,
                table_prefix=self.table_prefix,
                table_period=self.table_period,
            )
        except KeyDesignError as exc:
            field = {"layout": "layout_kind", "bucket": "bucket", "table_period": "table_period"}
            raise self.invalid(field.get(exc.field, "table_prefix"), exc.reason) from None
        self._layout = layout
        self.check(
            self.max_age is None or self.max_age <= self.retention_ms,
            "max_age",
            "must not exceed RETENTION: an older reading would be stored already expired or routed to a table "
            "already dropped",
        )
        try:
            self._granularities = Granularities.parse(self.rollups, "rollups") if self.rollups else None
        except KeyDesignError as exc:
            raise self.invalid("rollups", exc.reason) from None
        return self

    @property
    def granularities(self) -> Granularities | None:
        """The rollup levels, or None when rollups are off."""
        return self._granularities

    @property
    def layout(self) -> Layout:
        return self._layout

    @property
    def max_age_ms(self) -> int:
        """How old a reading may be: MAX_AGE, or :data:`DEFAULT_MAX_AGE_MS` (RETENTION if shorter) when unset."""
        return min(DEFAULT_MAX_AGE_MS, self.retention_ms) if self.max_age is None else self.max_age

    @property
    def common(self) -> CommonSettings:
        """The shared part (every function's settings extend it)."""
        return self
