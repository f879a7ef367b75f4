"""Asking the rotator to build the table of a period that has none.

Ingest admits a reading up to ``MAX_AGE`` old. Its period's table exists when
the deployment was running then (the rotator keeps closed tables until their
export horizon); it does not when the reading is older than the deployment or
its period was skipped (a backfill). Ingest hands such a reading back and asks
the rotator, with an asynchronous invoke of ``{"build": [<table>, ...]}`` (the
request ``rotator.request`` accepts), to build the table, so that the
redelivery finds it. The rotator decides: it builds only tables of its own
naming whose period a reading can still be admitted to.

Asking is best effort: a failed invoke is logged and asked again by the next
delivery of the same readings. A container asks for a table at most once per
:data:`ASK_EVERY_MS`: a batch retried five times in a few seconds makes one
request, not five.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from adapters.observability import logger
from adapters.retry import Clock

#: A container asks for the same table again only after this long (a build takes seconds to a minute).
ASK_EVERY_MS = 30_000
#: Tables one request names; the rotator refuses more (its run stays bounded).
TABLES_PER_REQUEST = 24


class InvokeApi(Protocol):
    """Lambda's Invoke (a boto3 or botocore Lambda client satisfies it)."""

    def invoke(self, **kwargs: Any) -> Mapping[str, Any]: ...


def build_request(tables: Iterable[str]) -> dict[str, list[str]]:
    """The rotator's event asking for ``tables`` (names, as ``Layout.table_for`` builds them)."""
    return {"build": sorted(tables)}


class TableBuilds:
    """Asks the rotator function (``function``: name or ARN) to build tables, asynchronously."""

    def __init__(self, api: InvokeApi, function: str, *, clock: Clock = time.monotonic) -> None:
        self._api = api
        self._function = function
        self._clock = clock
        self._asked: dict[str, float] = {}
        self._lock = threading.Lock()

    def request(self, tables: Iterable[str]) -> list[str]:
        """Ask for those of ``tables`` not asked for lately; the tables asked for by this call."""
        now = self._clock()
        with self._lock:
            fresh = sorted(t for t in set(tables) if now - self._asked.get(t, -1e18) >= ASK_EVERY_MS / 1000)
            for table in fresh:
                self._asked[table] = now
        asked: list[str] = []
        for first in range(0, len(fresh), TABLES_PER_REQUEST):
            chunk = fresh[first : first + TABLES_PER_REQUEST]
            try:
                self._api.invoke(
                    FunctionName=self._function,
                    InvocationType="Event",
                    Payload=json.dumps(build_request(chunk)).encode(),
                )
            except (ClientError, BotoCoreError):
                logger.warning("asking the rotator to build tables failed; asked again on redelivery", exc_info=True)
                with self._lock:
                    for table in chunk:
                        self._asked.pop(table, None)
                continue
            asked.extend(chunk)
        return asked
