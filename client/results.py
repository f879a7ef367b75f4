"""Typed results of the query API: what each route's JSON body becomes.

Parsing is tolerant of fields a newer API adds (they are ignored) and strict
about the ones this client uses (a missing one is an :class:`ApiError` with
status 0 rather than a ``KeyError`` deep in a caller).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import asdict, astuple, dataclass, field
from typing import Any


class ApiError(Exception):
    """The API refused a request, or answered in a way this client cannot read.

    ``error`` and ``parameter`` are the API's own (``{"error": ..., "parameter": ...}``);
    ``status`` is the HTTP status (0 when no answer came, e.g. the connection failed).
    """

    def __init__(
        self,
        status: int,
        error: str,
        parameter: str | None = None,
        *,
        request_id: str | None = None,
        attempts: int = 1,
    ) -> None:
        self.status = status
        self.error = error
        self.parameter = parameter
        self.request_id = request_id
        self.attempts = attempts
        where = f" (parameter {parameter})" if parameter else ""
        tried = f" after {attempts} attempts" if attempts > 1 else ""
        super().__init__(f"HTTP {status}{where}: {error}{tried}" if status else f"{error}{tried}")


def _need(body: Mapping[str, Any], name: str) -> Any:
    if name not in body:
        raise ApiError(0, f"the API's answer has no {name!r} field; is the URL the query API's stage URL?")
    return body[name]


@dataclass(frozen=True, slots=True)
class Reading:
    """One reading, in the shape producers send it."""

    entity_id: str
    event_id: str
    timestamp: str
    measures: dict[str, int | float]
    dimensions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Reading:
        return cls(
            entity_id=str(_need(body, "entity_id")),
            event_id=str(_need(body, "event_id")),
            timestamp=str(_need(body, "timestamp")),
            measures=dict(body.get("measures") or {}),
            dimensions=dict(body.get("dimensions") or {}),
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ReadCost:
    """What one request read from DynamoDB."""

    partitions_planned: int = 0
    partitions_queried: int = 0
    queries: int = 0
    items_read: int = 0
    read_units: float = 0.0

    @classmethod
    def from_json(cls, body: Mapping[str, Any] | None) -> ReadCost:
        body = body or {}
        # Each field has the type of its default: int counts, float read units.
        return cls(**{name: type(zero)(body.get(name, zero)) for name, zero in asdict(cls()).items()})

    def __add__(self, other: ReadCost) -> ReadCost:
        return ReadCost(*(mine + theirs for mine, theirs in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True, slots=True)
class ReadingsPage:
    """One page of a per-entity or cross-entity read."""

    entity_id: str | None
    from_: str
    to: str
    order: str
    items: list[Reading]
    next_cursor: str | None
    cost: ReadCost

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ReadingsPage:
        return cls(
            entity_id=body.get("entity_id"),
            from_=str(body.get("from", "")),
            to=str(body.get("to", "")),
            order=str(body.get("order", "asc")),
            items=[Reading.from_json(item) for item in _need(body, "items")],
            next_cursor=body.get("next_cursor"),
            cost=ReadCost.from_json(body.get("cost")),
        )


@dataclass(frozen=True, slots=True)
class LatestResult:
    """The newest reading of an entity within the lookback, or ``reading=None``."""

    entity_id: str
    searched_from: str
    searched_to: str
    reading: Reading | None
    cost: ReadCost

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> LatestResult:
        reading = _need(body, "reading")
        return cls(
            entity_id=str(_need(body, "entity_id")),
            searched_from=str(body.get("searched_from", "")),
            searched_to=str(body.get("searched_to", "")),
            reading=Reading.from_json(reading) if reading is not None else None,
            cost=ReadCost.from_json(body.get("cost")),
        )


@dataclass(frozen=True, slots=True)
class Interval:
    """One interval of a downsampled series: per measure, the statistics asked for."""

    start: str
    readings: int
    measures: dict[str, dict[str, int | float]]
    #: From rollups: why a part of the interval was set aside (left out of its figures); None when none was.
    set_aside: str | None = None


@dataclass(frozen=True, slots=True)
class AggregateSeries:
    """A downsampled series (one entry per interval that holds readings)."""

    entity_id: str
    from_: str
    to: str
    interval: str
    stats: list[str]
    intervals: list[Interval]
    readings: int
    cost: ReadCost

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> AggregateSeries:
        return cls(
            entity_id=str(_need(body, "entity_id")),
            from_=str(body.get("from", "")),
            to=str(body.get("to", "")),
            interval=str(body.get("interval", "")),
            stats=[str(s) for s in body.get("stats") or ()],
            intervals=[
                Interval(
                    start=str(_need(i, "start")),
                    readings=int(i.get("readings", 0)),
                    measures={m: dict(v) for m, v in (i.get("measures") or {}).items()},
                    set_aside=i.get("set_aside"),
                )
                for i in _need(body, "intervals")
            ],
            readings=int(body.get("readings", 0)),
            cost=ReadCost.from_json(body.get("cost")),
        )

    def rows(self) -> list[dict[str, Any]]:
        """One flat row per interval and measure: start, measure, readings and each statistic."""
        out: list[dict[str, Any]] = []
        for interval in self.intervals:
            for measure, values in sorted(interval.measures.items()):
                out.append({"start": interval.start, "measure": measure, "readings": interval.readings, **values})
        return out

    def to_dataframe(self) -> Any:
        """A pandas DataFrame of :meth:`rows` (pandas is optional: ``pip install pandas``)."""
        return _pandas().DataFrame(self.rows(), columns=["start", "measure", "readings", *self.stats])


@dataclass(frozen=True, slots=True)
class Explanation:
    """The plan of a read (``explain=true``): the main figures, and the whole body in ``raw``."""

    route: str
    layout: str
    partition_count: int
    tables: list[str]
    minimum_read_units: float
    estimated_read_units: float
    raw: dict[str, Any]

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Explanation:
        return cls(
            route=str(_need(body, "route")),
            layout=str(body.get("layout", "")),
            partition_count=int(_need(body, "partition_count")),
            tables=[str(t) for t in body.get("tables") or ()],
            minimum_read_units=float(body.get("minimum_read_units", 0.0)),
            estimated_read_units=float(body.get("estimated_read_units", 0.0)),
            raw=dict(body),
        )


def flat_reading(reading: Reading) -> dict[str, Any]:
    """A reading as one flat row: timestamp, entity, event id, ``m.<measure>``, ``d.<dimension>``."""
    row: dict[str, Any] = {"timestamp": reading.timestamp, "entity_id": reading.entity_id, "event_id": reading.event_id}
    row.update({f"m.{k}": v for k, v in sorted(reading.measures.items())})
    row.update({f"d.{k}": v for k, v in sorted(reading.dimensions.items())})
    return row


def readings_dataframe(readings: Iterable[Reading]) -> Any:
    """A pandas DataFrame with one row per reading (:func:`flat_reading`); pandas is optional."""
    pandas = _pandas()
    frame = pandas.DataFrame([flat_reading(r) for r in readings])
    if "timestamp" in frame.columns:
        frame["timestamp"] = pandas.to_datetime(frame["timestamp"], utc=True)
    return frame


def _pandas() -> Any:
    try:
        return importlib.import_module("pandas")
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "to_dataframe() needs pandas, which is not a dependency of this project: pip install pandas"
        ) from None
