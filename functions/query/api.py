"""The REST API: routes, typed parameters, and every error mapped to HTTP in one place.

Each route is a module-level function on :data:`router` (a Powertools ``Router``),
listed in :data:`ROUTES`; it is given the :class:`QueryService` as a parameter
(``Depends``), so a test can call it on its own. ``create_app(service)`` builds
the resolver, includes the router and provides the service; ``handler.py``
builds it once per container with the service configured from the environment,
and ``query.openapi`` builds it with no service at all to print the OpenAPI
document (a route reaches the service only when called).

Error contract: every error body is ``{"error": "...", "parameter": "..."}``.

=====  ==============================================================
400    bad input (parameter named): malformed, missing, unknown or
       repeated parameters, reversed or oversize ranges, bad cursors;
       also a route the deployment's layout cannot serve (parameter null)
404    no such route
413    an aggregate would decode more than MAX_SCAN_ITEMS readings, or would pass
       MAX_QUERY_CALLS or the deadline (parameter ``to``; says how far it got)
500    a fault of ours (logged with the request id); never caused by input;
       also a stored block that does not decode (logged with its key)
503    DynamoDB throttled us after retries; retry after a moment
=====  ==============================================================
"""

# No ``from __future__ import annotations`` here: Powertools reads a route's type hints on every
# request (to resolve its ``Depends``), and string annotations would be evaluated again each time.

import re
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from typing import Annotated, Any, Literal, TypeVar, get_type_hints
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Depends, Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from adapters.clients import DYNAMODB_THROTTLING, error_code
from adapters.observability import logger, metrics
from adapters.partition_reader import CorruptBlock
from adapters.settings import explain
from keydesign import InvalidInput, validate_entity_id
from query.cursor import MAX_CURSOR_CHARS
from query.errors import ScanLimitExceeded, UnsupportedByLayout
from query.logic import QueryService
from query.models import AggregateSeries, ErrorBody, Explanation, LatestReading, ReadingsPage
from query.params import (
    Order,
    PageArgs,
    ReadArgs,
    parse_interval,
    parse_limit,
    parse_lookback,
    parse_measures,
    parse_range,
    parse_stats,
)
from query.settings import DEFAULT_LIMIT, LIMIT_CEILING


def _error_response(description: str) -> OpenAPIResponse:
    return {"description": description, "content": {"application/json": {"model": ErrorBody}}}


_ERRORS: dict[int, OpenAPIResponse] = {
    400: _error_response("Bad input; `parameter` names the offending query or path parameter"),
    503: _error_response("DynamoDB is throttling reads; retry after the Retry-After delay"),
}


def _responses(ok: str) -> dict[int, OpenAPIResponse]:
    # A 200 without "content" takes the route's return annotation as its schema.
    return {200: {"description": ok}, **_ERRORS}


# -- parameters, shared by the routes -------------------------------------------------

_LIMIT = (
    f"Readings per page, 1..MAX_LIMIT (a deployment setting; default and ceiling {LIMIT_CEILING}). "
    f"Default {DEFAULT_LIMIT}, or MAX_LIMIT when that is lower"
)
EntityId = Annotated[
    str, Path(description="Entity id, percent-encoded: 1-128 of A-Z a-z 0-9 . _ : @ + = / - ('/' as %2F)")
]
From = Annotated[
    str,
    Query(
        alias="from",
        description="Start of the range, inclusive: RFC 3339 with offset (2026-11-22T06:00:00Z) or epoch milliseconds",
    ),
]
To = Annotated[
    str,
    Query(description="End of the range, exclusive (same forms as `from`); `to - from` is at most MAX_RANGE (31 days)"),
]
Limit = Annotated[int | None, Query(ge=1, le=LIMIT_CEILING, description=_LIMIT)]
Cursor = Annotated[
    str | None,
    Query(
        max_length=MAX_CURSOR_CHARS,
        description="`next_cursor` of the previous page, unchanged; valid only with the same other parameters "
        "(except limit)",
    ),
]
OrderParam = Annotated[Literal["asc", "desc"], Query(description="Time order of the page")]
Measures = Annotated[str | None, Query(description="Comma-separated measure names to return (default: every measure)")]
Consistent = Annotated[bool, Query(description="Strongly consistent reads (twice the read units)")]
Explain = Annotated[
    bool, Query(description="Return the query plan (partitions, tables, estimated read units) instead of data")
]


Interval = Annotated[
    str, Query(description="Interval length: 90s, 15m, 1h, 1d... at least 1s, at most 10,000 per range")
]
Stats = Annotated[str | None, Query(description="Comma-separated subset of count,min,max,avg,sum (default: all)")]
AggregateMeasures = Annotated[str | None, Query(description="Comma-separated measures to aggregate (default: all)")]


# -- the service and the deadline, injected (Powertools' ``Depends``) ----------------------


def query_service() -> QueryService:
    """The service the routes read with. ``create_app`` provides it to its resolver through
    ``dependency_overrides``, which each resolver holds for itself: several resolvers live in one
    process (tests, ``query.openapi``'s schema-only app), and a router's ``context`` is the context
    of the last resolver that included it. Unprovided, a route answers 500."""
    raise RuntimeError("the query app was built without a service")


def time_left_ms() -> int | None:
    """The function's remaining time (None when the resolver runs outside Lambda)."""
    remaining = getattr(router.lambda_context, "get_remaining_time_in_millis", None)
    return int(remaining()) if callable(remaining) else None


Service = Annotated[QueryService, Depends(query_service)]
TimeLeft = Annotated[int | None, Depends(time_left_ms)]


# -- the routes -------------------------------------------------------------------------

router = Router()  # type: ignore[no-untyped-call]  # its __init__ is not annotated
#: (method, path as OpenAPI spells it) -> the route function, for every route on :data:`router`.
ROUTES: dict[tuple[str, str], Callable[..., Any]] = {}
#: (method, path) -> the query parameters the route declares, as the client spells them.
_QUERY_PARAMETERS: dict[tuple[str, str], frozenset[str]] = {}
_Route = TypeVar("_Route", bound=Callable[..., Any])


def reject_unknown_parameters(app: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response[Any]:
    """Route middleware. It runs after Powertools' validation; a request that
    fails validation is checked for the same problems first, in the
    RequestValidationError handler, so the typo is what gets reported."""
    problem = _parameter_problem(app)
    return problem if problem is not None else next_middleware(app)


def _query_parameters(route: Callable[..., Any]) -> frozenset[str]:
    """The query parameters a route function declares, as the client spells them."""
    names = set()
    for name, hint in get_type_hints(route, include_extras=True).items():
        for marker in getattr(hint, "__metadata__", ()):
            if isinstance(marker, Query):
                names.add(marker.alias or name)
    return frozenset(names)


def _get(path: str, **openapi: Any) -> Callable[[_Route], _Route]:
    """``router.get``, remembering the route and its query parameters for the unknown-parameter check."""

    def register(route: _Route) -> _Route:
        key = ("GET", re.sub(r"<(\w+)>", r"{\1}", path))
        ROUTES[key] = route
        _QUERY_PARAMETERS[key] = _query_parameters(route)
        registered: _Route = router.get(path, middlewares=[reject_unknown_parameters], **openapi)(route)
        return registered

    return register


@_get(
    "/entities/<entity_id>/readings",
    summary="Readings of one entity in a time range",
    description=(
        "Every reading of the entity in [from, to), across buckets, shards and per-period tables, merged in "
        "time order (ties: event id) and paged by an opaque cursor. Expired (TTL) readings are left out; "
        "a reading stored in several blocks (a redelivery, a correction) is returned once, as its newest "
        "version has it."
    ),
    tags=["readings"],
    operation_id="getEntityReadings",
    responses=_responses("A page of readings, or the plan when explain=true"),
)
def entity_readings(
    *,
    entity_id: EntityId,
    from_: From,
    to: To,
    limit: Limit = None,
    cursor: Cursor = None,
    order: OrderParam = "asc",
    measures: Measures = None,
    consistent: Consistent = False,
    explain: Explain = False,
    service: Service,
    time_left: TimeLeft = None,
) -> ReadingsPage | Explanation:
    entity = _entity(entity_id)
    page = _page(service, from_, to, limit, cursor=cursor, order=order)
    read = ReadArgs(parse_measures(measures), consistent, explain)
    return service.entity_readings(entity, page, read, time_left_ms=time_left)


@_get(
    "/entities/<entity_id>/latest",
    summary="The most recent reading of one entity",
    description=(
        "Walks the entity's partitions backwards from now with descending queries, newest bucket first, "
        "up to `lookback` (at most LATEST_LOOKBACK, default 7 days). `reading` is null when there is none."
    ),
    tags=["readings"],
    operation_id="getEntityLatest",
    responses=_responses("The latest reading (null when none in the lookback), or the plan when explain=true"),
)
def latest(
    *,
    entity_id: EntityId,
    lookback: Annotated[
        str | None,
        Query(description="How far back to look, e.g. 15m, 6h, 7d (default and maximum: LATEST_LOOKBACK)"),
    ] = None,
    measures: Measures = None,
    consistent: Consistent = False,
    explain: Explain = False,
    service: Service,
) -> LatestReading | Explanation:
    entity = _entity(entity_id)
    lookback_ms = parse_lookback(lookback, service.limits.latest_lookback_ms)
    return service.latest(entity, lookback_ms, ReadArgs(parse_measures(measures), consistent, explain))


@_get(
    "/entities/<entity_id>/aggregates",
    summary="Downsampled series of one entity",
    description=(
        "count, min, max, avg and sum of every measure per interval (aligned to the epoch, UTC). When the "
        "interval is a whole multiple of a rollup granularity (ROLLUPS, default 1m,1h,1d) and from/to fall on "
        "its boundaries, the intervals the rollups cover are read from them (`source`, `rollups_through`); "
        "the rest is computed by streaming through the readings. Intervals without readings are left out. "
        "The raw part may decode at most MAX_SCAN_ITEMS readings (default 100,000), start at most MAX_QUERY_CALLS "
        "Query calls (default 200; reads of the entity's compacted hours, at most MAX_COMPACTED_CALLS, 1,000) and "
        "must finish before the function's deadline; past any of them the "
        "request is refused with 413, which says how far the scan got so the range can be split there."
    ),
    tags=["aggregates"],
    operation_id="getEntityAggregates",
    responses={
        **_responses("The series, or the plan when explain=true"),
        413: _error_response(
            "The aggregate would decode more readings, make more Query calls or take longer than one request "
            "may; the message says how far it got: split the range there"
        ),
    },
)
def aggregates(
    *,
    entity_id: EntityId,
    from_: From,
    to: To,
    interval: Interval,
    stats: Stats = None,
    measures: AggregateMeasures = None,
    consistent: Consistent = False,
    explain: Explain = False,
    service: Service,
    time_left: TimeLeft = None,
) -> AggregateSeries | Explanation:
    entity = _entity(entity_id)
    window = parse_range(from_, to, service.limits.max_range_ms)
    interval_ms = parse_interval(interval, window)
    wanted = parse_stats(stats)
    read = ReadArgs(parse_measures(measures), consistent, explain)
    return service.aggregates(entity, window, interval_ms, wanted, read, time_left_ms=time_left)


@_get(
    "/aggregates",
    summary="Downsampled series of every entity, from rollups",
    description=(
        "count, min, max, avg and sum of every measure over every entity per interval, read from the rollup "
        "totals only (no raw reading is read): the interval must be a whole multiple of a rollup granularity "
        "(ROLLUPS, default 1m,1h,1d) and from/to must fall on its boundaries, or the request is refused with "
        "400. Intervals the rollups do not cover yet are left out: `reached` says how far the answer goes. "
        "At most 10,000 intervals per range, as per entity; the answer is one page."
    ),
    tags=["aggregates"],
    operation_id="getTotalAggregates",
    responses=_responses("The series over every entity"),
)
def total_aggregates(
    *,
    from_: From,
    to: To,
    interval: Interval,
    stats: Stats = None,
    measures: AggregateMeasures = None,
    consistent: Consistent = False,
    service: Service,
) -> AggregateSeries:
    window = parse_range(from_, to, service.limits.max_range_ms)
    read = ReadArgs(parse_measures(measures), consistent, False)
    return service.total_aggregates(window, parse_interval(interval, window), parse_stats(stats), read)


@_get(
    "/readings",
    summary="Readings of every entity in a time range (hybrid layout)",
    description=(
        "Every reading in [from, to) from every shard of every bucket. Pages go bucket by bucket in time "
        "order; within a bucket items are ordered by entity id, then time, so each entity's readings are in "
        "time order and every reading comes exactly once. `desc` is the exact reverse. Deployments on the "
        "random or calculated layout answer 400: their partition keys hold the entity."
    ),
    tags=["readings"],
    operation_id="getRangeReadings",
    responses=_responses("A page of readings, or the plan when explain=true"),
)
def range_readings(
    *,
    from_: From,
    to: To,
    limit: Limit = None,
    cursor: Cursor = None,
    order: OrderParam = "asc",
    measures: Measures = None,
    consistent: Consistent = False,
    explain: Explain = False,
    service: Service,
    time_left: TimeLeft = None,
) -> ReadingsPage | Explanation:
    page = _page(service, from_, to, limit, cursor=cursor, order=order)
    read = ReadArgs(parse_measures(measures), consistent, explain)
    return service.range_readings(page, read, time_left_ms=time_left)


def create_app(service: QueryService | None) -> APIGatewayRestResolver:
    """The resolver with every route. ``service`` may be None only to render the OpenAPI document."""
    app = APIGatewayRestResolver(
        enable_validation=True,
        response_validation_error_http_code=HTTPStatus.INTERNAL_SERVER_ERROR,
    )
    app.include_router(router)
    if service is not None:
        app.dependency_overrides[query_service] = lambda: service
    _install_error_mapping(app)
    return app


def _page(
    service: QueryService, from_: str, to: str, limit: int | None, *, cursor: str | None, order: Order
) -> PageArgs:
    limits = service.limits
    window = parse_range(from_, to, limits.max_range_ms)
    size = min(DEFAULT_LIMIT, limits.max_limit) if limit is None else limit
    return PageArgs(window, parse_limit(size, limits.max_limit), cursor, order)


def _entity(raw: str) -> str:
    """REST APIs pass the path percent-encoded; ids are checked after decoding."""
    try:
        decoded = unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInput("entity_id", "is not valid percent-encoded UTF-8") from None
    return validate_entity_id(decoded, "entity_id")


# -- errors ---------------------------------------------------------------------------


def _error(status: int, message: str, parameter: str | None, headers: Mapping[str, str] | None = None) -> Response[Any]:
    metrics.add_metric(name="ClientErrors" if status < 500 else "ServerErrors", unit=MetricUnit.Count, value=1)
    if status < 500:
        logger.info("request refused", extra={"status": status, "parameter": parameter, "reason": message[:300]})
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body={"error": message, "parameter": parameter},
        headers=headers,
    )


def _parameter_problem(app: APIGatewayRestResolver) -> Response[Any] | None:
    """Unknown or repeated query parameters: a typo such as ``form=`` must not
    silently change the meaning of a request."""
    declared = _QUERY_PARAMETERS.get((app.request.method, app.request.route))
    if declared is None:
        return None
    event = app.current_event
    multi: Mapping[str, Sequence[str]] = event.multi_value_query_string_parameters or {}
    single: Mapping[str, str] = event.query_string_parameters or {}
    for name in sorted({*multi, *single}):
        if name not in declared:
            known = ", ".join(sorted(declared))
            return _error(400, f"{name[:64]}: is not a parameter of this route (known: {known})", name[:64])
    for name, values in sorted(multi.items()):
        if len(values) > 1:
            return _error(400, f"{name}: was given {len(values)} times; give it once", name)
    return None


def _install_error_mapping(app: APIGatewayRestResolver) -> None:
    def invalid_request(exc: RequestValidationError) -> Response[Any]:
        problem = _parameter_problem(app)
        if problem is not None:
            return problem
        errors = exc.errors()
        if not errors:
            return _error(400, "invalid request", None)
        loc: Sequence[object] = errors[0].get("loc") or ()
        parameter = str(loc[-1]) if len(loc) > 1 else None
        reason = explain(errors[0])
        return _error(400, f"{parameter}: {reason}" if parameter else reason, parameter)

    def invalid_input(exc: InvalidInput) -> Response[Any]:
        return _error(400, str(exc), exc.field)

    def scan_limit(exc: ScanLimitExceeded) -> Response[Any]:
        return _error(413, str(exc), exc.parameter)

    def unsupported(exc: UnsupportedByLayout) -> Response[Any]:
        return _error(400, str(exc), None)

    def not_found(exc: NotFoundError) -> Response[Any]:
        event = app.current_event
        return _error(404, f"no route {event.http_method} {event.path[:200]}", None)

    def dynamodb_error(exc: ClientError) -> Response[Any]:
        code = error_code(exc)
        if code in DYNAMODB_THROTTLING:
            logger.warning("throttled after retries", extra={"code": code})
            return _error(503, "the store is busy; retry in a moment", None, {"Retry-After": "1"})
        logger.exception("DynamoDB error")
        return _internal_error(app)

    def corrupt_block(exc: CorruptBlock) -> Response[Any]:
        # Returning the range without the block's readings would be a silent hole in it.
        logger.error(
            "a stored block does not decode",
            extra={"table": exc.table, "pk": exc.pk, "sk": exc.sk, "reason": exc.reason},
        )
        metrics.add_metric(name="CorruptBlocks", unit=MetricUnit.Count, value=1)
        request_id = app.current_event.request_context.request_id
        return _error(
            500,
            f"a stored block of readings in this range cannot be decoded, so the range cannot be read whole: "
            f"table {exc.table!r}, pk {exc.pk!r}, sk {exc.sk!r}: {exc.reason[:200]} (request id {request_id})",
            None,
        )

    def unexpected(exc: Exception) -> Response[Any]:
        logger.exception("unhandled error")
        return _internal_error(app)

    # Plain calls rather than decorators: Powertools' decorators are untyped.
    # Lookup follows the exception's MRO, so the most specific handler wins.
    app.exception_handler(RequestValidationError)(invalid_request)
    app.exception_handler(InvalidInput)(invalid_input)
    app.exception_handler(ScanLimitExceeded)(scan_limit)
    app.exception_handler(UnsupportedByLayout)(unsupported)
    app.exception_handler(ClientError)(dynamodb_error)
    app.exception_handler(CorruptBlock)(corrupt_block)
    app.exception_handler(Exception)(unexpected)
    app.not_found(not_found)


def _internal_error(app: APIGatewayRestResolver) -> Response[Any]:
    request_id = app.current_event.request_context.request_id
    return _error(500, f"internal error (request id {request_id})", None)
