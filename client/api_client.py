"""A client for the query API: signed requests, retries, pages followed as iterators.

The deployed API uses IAM authorization, so every request is signed with
SigV4 (botocore's signer, service ``execute-api``, credentials from botocore's
usual chain: environment, profile, SSO, instance role...). The local API on
loopback is not signed. HTTP is the standard library's: the client adds no
dependency beyond botocore, which the project already has.

Retries: 429 (API Gateway throttling), 502/504 (a gateway or Lambda fault),
503 (DynamoDB throttled the query Lambda) and dropped connections are retried
up to ``max_attempts`` with exponential backoff and full jitter; a
``Retry-After`` header sets the least wait. Every read is idempotent, so a
retry is always safe.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from adapters.clients import endpoint_client
from adapters.retry import Backoff, Deadline, RetryLoop, Sleep
from keydesign.timefmt import format_ts, from_datetime

from .results import (
    AggregateSeries,
    ApiError,
    Explanation,
    LatestResult,
    ReadCost,
    Reading,
    ReadingsPage,
    readings_dataframe,
)

RETRYABLE_STATUS = frozenset({429, 502, 503, 504})
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
#: A server's Retry-After is honoured up to this many seconds (a bound on one wait).
MAX_RETRY_AFTER_S = 30.0

TimeLike = str | int | datetime


def format_time(value: TimeLike) -> str:
    """A time parameter as the API takes it: RFC 3339 text, epoch milliseconds, or a datetime (aware)."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a datetime must carry a time zone (e.g. datetime.now(UTC))")
        return format_ts(from_datetime(value))  # ValueError outside 1970..9999 UTC, which the API refuses
    if isinstance(value, bool):
        raise ValueError("a time is RFC 3339 text, epoch milliseconds or a datetime")
    return str(value)


def resolve_stack_outputs(stack_name: str, *, region: str | None = None) -> dict[str, str]:
    """The CloudFormation outputs of the deployed stack (``ApiUrl``, ``RejectsQueueUrl``, ``IngestStreamName``...)."""
    cloudformation = endpoint_client("cloudformation", region=region)
    stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes


Transport = Callable[[str, str, Mapping[str, str], float], Response]


def urllib_transport(method: str, url: str, headers: Mapping[str, str], timeout_s: float) -> Response:
    """One HTTP(S) request with the standard library."""
    parts = urlsplit(url)
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connection_class(parts.netloc, timeout=timeout_s)
    try:
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, headers=dict(headers))
        answer = connection.getresponse()
        return Response(answer.status, {k.lower(): v for k, v in answer.getheaders()}, answer.read())
    finally:
        connection.close()


class QueryClient:
    """The query API of one deployment (or of the local system).

    ``QueryClient("http://127.0.0.1:8080/v1")`` for the local API (no signing);
    ``QueryClient(url)`` with the stack's ``ApiUrl`` output, or
    ``QueryClient.for_stack("TimeSeriesIngest")``, for the deployed one.
    """

    def __init__(
        self,
        api_url: str,
        *,
        region: str | None = None,
        sign: bool | None = None,
        credentials: Any = None,
        max_attempts: int = 5,
        timeout_s: float = 35.0,
        transport: Transport = urllib_transport,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        parts = urlsplit(api_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"api_url {api_url!r} is not an http(s) URL such as the stack's ApiUrl output")
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.api_url = api_url.rstrip("/")
        self._sign = sign if sign is not None else parts.hostname not in _LOOPBACK
        self._region = region or _region_of(parts.hostname)
        if self._sign and not self._region:
            raise ValueError(f"no region to sign requests to {parts.hostname} with: pass region=...")
        self._credentials = credentials
        self._max_attempts = max_attempts
        self._backoff = Backoff(base_ms=200, max_delay_ms=10_000)
        self._timeout_s = timeout_s
        self._transport = transport
        self._sleep = sleep
        self._rng = rng or random.Random()
        #: Requests sent and retries made since the client was built (for progress and tests).
        self.requests = 0
        self.retries = 0

    @classmethod
    def for_stack(cls, stack_name: str, *, region: str | None = None, **kwargs: Any) -> QueryClient:
        """The client of the deployed stack's API, from its ``ApiUrl`` output."""
        outputs = resolve_stack_outputs(stack_name, region=region)
        if "ApiUrl" not in outputs:
            raise ValueError(f"stack {stack_name} has no ApiUrl output; is it this project's stack?")
        return cls(outputs["ApiUrl"], region=region, **kwargs)

    # -- routes --------------------------------------------------------------------

    def readings_pages(
        self,
        entity_id: str,
        from_: TimeLike,
        to: TimeLike,
        *,
        limit: int | None = None,
        order: str = "asc",
        measures: list[str] | None = None,
        consistent: bool = False,
        cursor: str | None = None,
    ) -> Iterator[ReadingsPage]:
        """Every page of one entity's readings in ``[from_, to)``, following ``next_cursor``."""
        path = f"/entities/{quote(entity_id, safe='')}/readings"
        params = _range_params(from_, to, limit, order, measures, consistent)
        return self._pages(path, params, cursor)

    def readings(self, entity_id: str, from_: TimeLike, to: TimeLike, **kwargs: Any) -> ReadingStream:
        """Every reading of one entity in ``[from_, to)``, page after page (see :meth:`readings_pages`)."""
        return ReadingStream(self.readings_pages(entity_id, from_, to, **kwargs))

    def range_pages(
        self,
        from_: TimeLike,
        to: TimeLike,
        *,
        limit: int | None = None,
        order: str = "asc",
        measures: list[str] | None = None,
        consistent: bool = False,
        cursor: str | None = None,
    ) -> Iterator[ReadingsPage]:
        """Every page of every entity's readings in ``[from_, to)`` (hybrid layout)."""
        return self._pages("/readings", _range_params(from_, to, limit, order, measures, consistent), cursor)

    def range_readings(self, from_: TimeLike, to: TimeLike, **kwargs: Any) -> ReadingStream:
        """Every reading of every entity in ``[from_, to)``, bucket by bucket (see :meth:`range_pages`)."""
        return ReadingStream(self.range_pages(from_, to, **kwargs))

    def latest(
        self,
        entity_id: str,
        *,
        lookback: str | None = None,
        measures: list[str] | None = None,
        consistent: bool = False,
    ) -> LatestResult:
        """The newest reading of ``entity_id`` within ``lookback`` (default: the deployment's LATEST_LOOKBACK)."""
        params = _optional(lookback=lookback, measures=_join(measures), consistent=_flag(consistent))
        return LatestResult.from_json(self.get(f"/entities/{quote(entity_id, safe='')}/latest", params))

    def aggregates(
        self,
        entity_id: str,
        from_: TimeLike,
        to: TimeLike,
        interval: str,
        *,
        stats: list[str] | None = None,
        measures: list[str] | None = None,
        consistent: bool = False,
    ) -> AggregateSeries:
        """count/min/max/avg/sum of every measure per ``interval`` (e.g. ``15m``) over ``[from_, to)``."""
        params = {
            "from": format_time(from_),
            "to": format_time(to),
            "interval": interval,
            **_optional(stats=_join(stats), measures=_join(measures), consistent=_flag(consistent)),
        }
        return AggregateSeries.from_json(self.get(f"/entities/{quote(entity_id, safe='')}/aggregates", params))

    def explain(self, route: str, **kwargs: Any) -> Explanation:
        """The plan of a read instead of its data. ``route`` is ``readings``, ``latest``,
        ``aggregates`` or ``range``; ``kwargs`` are that method's arguments."""
        entity = kwargs.pop("entity_id", None)
        if route != "range" and not entity:
            raise ValueError(f"explain({route!r}) needs entity_id")
        if route in ("readings", "range"):
            params = _range_params(
                kwargs.pop("from_"),
                kwargs.pop("to"),
                kwargs.pop("limit", None),
                kwargs.pop("order", "asc"),
                kwargs.pop("measures", None),
                kwargs.pop("consistent", False),
            )
        elif route == "latest":
            params = _optional(lookback=kwargs.pop("lookback", None), measures=_join(kwargs.pop("measures", None)))
        elif route == "aggregates":
            params = {
                "from": format_time(kwargs.pop("from_")),
                "to": format_time(kwargs.pop("to")),
                "interval": kwargs.pop("interval"),
                **_optional(stats=_join(kwargs.pop("stats", None)), measures=_join(kwargs.pop("measures", None))),
            }
        else:
            raise ValueError(f"route {route!r} is not one of readings, latest, aggregates, range")
        if kwargs:
            raise TypeError(f"explain({route!r}) got unexpected arguments: {', '.join(sorted(kwargs))}")
        path = "/readings" if route == "range" else f"/entities/{quote(str(entity), safe='')}/{route}"
        return Explanation.from_json(self.get(path, {**params, "explain": "true"}))

    # -- transport -----------------------------------------------------------------

    def get(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        """GET ``path`` with ``params``; the JSON body of a 2xx, or :class:`ApiError`."""
        url = f"{self.api_url}{path}" + (f"?{urlencode(sorted(params.items()), quote_via=quote)}" if params else "")
        body: dict[str, Any] = {}
        failed = ApiError(0, "not sent")  # the answer of the last attempt, raised when no retry is left
        least_wait = 0.0  # the server's Retry-After, a floor under the backoff before the next attempt

        def call(pending: list[str], attempt: int) -> tuple[list[str], str]:
            nonlocal body, failed, least_wait
            self.requests += 1
            least_wait = 0.0
            try:
                response = self._transport("GET", url, self._headers(url), self._timeout_s)
            except (OSError, http.client.HTTPException) as exc:
                failed = ApiError(0, f"no answer from {self.api_url}: {exc}", attempts=attempt)
                failed.__cause__ = exc
                return pending, str(failed)
            if 200 <= response.status < 300:
                body = _json_body(response)
                return [], ""
            failed = _error_of(response, attempt)
            if response.status not in RETRYABLE_STATUS:
                raise failed
            retry_after = response.headers.get("retry-after")
            if retry_after is not None:
                with contextlib.suppress(ValueError):  # an HTTP date: the backoff alone
                    least_wait = min(float(retry_after), MAX_RETRY_AFTER_S)
            return pending, str(failed)

        def wait(delay: float) -> None:
            self.retries += 1
            self._sleep(max(delay, least_wait))

        def give_up(_pending: list[str], _why: str) -> None:
            raise failed

        retry = RetryLoop(self._backoff, sleep=wait, rng=self._rng, max_attempts=self._max_attempts)
        retry.run([url], call, Deadline.never(), give_up, unstarted="not sent")
        return body

    def _headers(self, url: str) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if not self._sign:
            return headers
        from botocore.auth import SigV4Auth  # noqa: PLC0415 - the local API needs no botocore import
        from botocore.awsrequest import AWSRequest  # noqa: PLC0415

        credentials = self._credentials or _session_credentials()
        request = AWSRequest(method="GET", url=url, headers=headers)
        SigV4Auth(credentials, "execute-api", self._region).add_auth(request)
        return dict(request.headers.items())

    def _pages(self, path: str, params: dict[str, str], cursor: str | None) -> Iterator[ReadingsPage]:
        while True:
            page = ReadingsPage.from_json(self.get(path, {**params, **({"cursor": cursor} if cursor else {})}))
            yield page
            if not page.next_cursor:
                return
            cursor = page.next_cursor


class ReadingStream:
    """The readings of a paged read, fetched a page at a time as they are iterated.

    ``pages``, ``count`` and ``cost`` grow as pages arrive; ``on_page`` (if set)
    is called with each page, e.g. to show progress.
    """

    def __init__(self, pages: Iterator[ReadingsPage]) -> None:
        self._pages = pages
        self.pages = 0
        self.count = 0
        self.cost = ReadCost()
        self.on_page: Callable[[ReadingsPage], None] | None = None

    def __iter__(self) -> Iterator[Reading]:
        for page in self._pages:
            self.pages += 1
            self.count += len(page.items)
            self.cost = self.cost + page.cost
            if self.on_page is not None:
                self.on_page(page)
            yield from page.items

    def to_dataframe(self) -> Any:
        """Every reading as a pandas DataFrame (pandas is optional: ``pip install pandas``)."""
        return readings_dataframe(self)


def _session_credentials() -> Any:
    import botocore.session  # noqa: PLC0415

    credentials = botocore.session.get_session().get_credentials()
    if credentials is None:
        raise ApiError(0, "no AWS credentials found to sign the request (environment, profile, SSO or role)")
    return credentials.get_frozen_credentials()


def _region_of(hostname: str) -> str | None:
    # https://{api-id}.execute-api.{region}.amazonaws.com/{stage}
    labels = hostname.split(".")
    if len(labels) >= 4 and labels[1] == "execute-api":
        return labels[2]
    import botocore.session  # noqa: PLC0415

    region = botocore.session.get_session().get_config_variable("region")
    return str(region) if region else None


def _json_body(response: Response) -> dict[str, Any]:
    try:
        body = json.loads(response.body)
    except ValueError:
        raise ApiError(response.status, f"the answer is not JSON: {response.body[:200]!r}") from None
    if not isinstance(body, dict):
        raise ApiError(response.status, "the answer is not a JSON object")
    return body


def _error_of(response: Response, attempts: int) -> ApiError:
    request_id = response.headers.get("x-amzn-requestid")
    try:
        body = json.loads(response.body)
    except ValueError:
        body = None
    if isinstance(body, dict) and "error" in body:
        parameter = body.get("parameter")
        return ApiError(
            response.status,
            str(body["error"]),
            str(parameter) if parameter is not None else None,
            request_id=request_id,
            attempts=attempts,
        )
    # API Gateway's own answers ({"message": ...}: missing signature, throttled, no such stage)
    message = body.get("message") if isinstance(body, dict) else None
    text = str(message) if message else response.body[:300].decode("utf-8", errors="replace") or "no body"
    return ApiError(response.status, text, request_id=request_id, attempts=attempts)


def _range_params(  # noqa: PLR0917 - one call site per route, all positional
    from_: TimeLike,
    to: TimeLike,
    limit: int | None,
    order: str,
    measures: list[str] | None,
    consistent: bool,
) -> dict[str, str]:
    return {
        "from": format_time(from_),
        "to": format_time(to),
        **_optional(
            limit=str(limit) if limit is not None else None,
            order=order if order != "asc" else None,
            measures=_join(measures),
            consistent=_flag(consistent),
        ),
    }


def _optional(**values: str | None) -> dict[str, str]:
    return {k: v for k, v in values.items() if v is not None}


def _join(values: list[str] | None) -> str | None:
    return ",".join(values) if values else None


def _flag(value: bool) -> str | None:
    return "true" if value else None
