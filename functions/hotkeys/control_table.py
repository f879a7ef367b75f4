"""The hot-key function's state in the control table: the load counted from the stream, window-close
claims and alert cooldowns. (The shard map, in the same table, is ``adapters.shard_map_store``.)

Item layout (every key a string; ``expires_at`` is epoch seconds for the table's TTL)::

    run       pk = load#<window start>#<cc>   sk = run#<table>#<sequence number of its first record>
              load (S, JSON below), window_ms, expires_at
    claim     pk = close#<window start>       sk = window
              state (claimed | done), owner, lease_until, summary, observed (BOOL), pages (N), expires_at
    judged    pk = close#<window start>       sk = entities#<nnn>  (nnn < the claim's pages)
              load (S, JSON {entity: write units}): the entities with their own count, as judged
    cooldown  pk = alert                      sk = entity#<entity> | key#<key family>
              until, owner, expires_at

A *run* is the load of a stretch of one stream batch that falls in one window
(see ``hotkeys.logic``), named by the record it starts at. It is **put**, not
added: a batch delivered again makes the same runs again, and each one lands on
its own earlier copy, so a redelivery counts nothing twice. A window's load is
the sum of its runs. Its JSON::

    {"k": {partition key: [wcu, writes, deletes, shared (0|1)]},
     "e": {entity: [wcu, writes, deletes, [partition keys written]]}}

``<cc>`` is ``shard_of(run id, COUNTER_SHARDS)``: every invocation of every
stream shard writes runs into the same window, so they are spread over several
partition keys, which the judging invocation queries.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from botocore.exceptions import ClientError

from adapters.clients import CONDITION_FAILED, error_code
from adapters.observability import logger
from adapters.retry import Backoff, RetryLoop, Sleep, batch_get
from hotkeys.detector import WindowLoad, WindowTally
from keydesign import format_ts, shard_of

CLAIMED = "claimed"
DONE = "done"
#: Entities per page of a judged window's loads: 2,000 ids of at most 128 characters stay under 300 KB.
JUDGED_PAGE_ENTITIES = 2_000
_BATCH_GET_ATTEMPTS = 6
#: Between BatchGetItem calls of the keys left unprocessed: 50 ms, doubling, at most 2 s (full jitter).
_BATCH_GET_BACKOFF = Backoff(base_ms=50, max_delay_ms=2_000)


class ControlTableApi(Protocol):
    """The DynamoDB client methods used here (the real client, a fake or a fault injector)."""

    def update_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def put_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def delete_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def query(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def batch_get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


def encode_load(load: WindowLoad) -> str:
    """A run's load as its item stores it (the JSON in the module docstring)."""
    body = {
        "k": {k: [v.wcu, v.writes, v.deletes, int(k in load.shared_keys)] for k, v in load.keys.items()},
        "e": {e: [v.wcu, v.writes, v.deletes, sorted(load.entity_keys.get(e, ()))] for e, v in load.entities.items()},
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True)


#: How long a window's counters and claims live: a day covers the windows a scale-down looks back over.
COUNTER_RETENTION_MS = 86_400_000
#: Partition keys a window's counters are spread over; also the run puts in flight at once.
COUNTER_SHARDS = 8


class ControlTable:
    """Runs, claims and cooldowns. Thread-safe; one instance per container. Every item expires
    (``expires_at``) ``COUNTER_RETENTION_MS`` after it is written (a cooldown after it ends)."""

    def __init__(self, dynamodb: ControlTableApi, table: str, *, sleep: Sleep = time.sleep) -> None:
        self._db = dynamodb
        self._table = table
        self._retry = RetryLoop(_BATCH_GET_BACKOFF, sleep=sleep, max_attempts=_BATCH_GET_ATTEMPTS)
        self._pool = ThreadPoolExecutor(max_workers=COUNTER_SHARDS, thread_name_prefix="hotkeys-counter")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # -- runs -------------------------------------------------------------------------------

    def put_runs(self, runs: Mapping[str, WindowLoad], now_ms: int) -> dict[str, str]:
        """Put every run (by run id) over any earlier copy of it, in parallel; the runs that failed, and why."""
        expires = str((now_ms + COUNTER_RETENTION_MS) // 1000)
        futures = {
            run_id: self._pool.submit(self._db.put_item, **self._run_put(run_id, load, expires))
            for run_id, load in runs.items()
        }
        failed: dict[str, str] = {}
        for run_id, future in futures.items():
            try:
                future.result()
            except ClientError as exc:
                failed[run_id] = error_code(exc) or "ClientError"
            except Exception as exc:  # a dropped connection, a timeout: the same outcome for the records
                failed[run_id] = type(exc).__name__
        return failed

    def _run_put(self, run_id: str, load: WindowLoad, expires: str) -> dict[str, Any]:
        pk = f"load#{format_ts(load.start_ms)}#{shard_of(run_id, COUNTER_SHARDS):02d}"
        return {
            "TableName": self._table,
            "Item": {
                "pk": {"S": pk},
                "sk": {"S": f"run#{run_id}"},
                "load": {"S": encode_load(load)},
                "window_ms": {"N": str(load.width_ms)},
                "expires_at": {"N": expires},
            },
        }

    def read_window(self, start_ms: int, width_ms: int) -> WindowLoad:
        """Every run of one window, from every invocation, added up: the window's load."""
        tally = WindowTally(start_ms, width_ms)
        skipped = 0
        for item in self._query_all(f"load#{format_ts(start_ms)}#{shard:02d}" for shard in range(COUNTER_SHARDS)):
            try:
                if int(item["window_ms"]["N"]) != width_ms or not _s(item, "sk").startswith("run#"):
                    raise ValueError("not a run of this window")
                body = json.loads(_s(item, "load"))
                run_keys = [(str(k), _counts(v[:3]), v[3] == 1) for k, v in body["k"].items()]
                run_entities = [(str(e), _counts(v[:3]), [str(k) for k in v[3]]) for e, v in body["e"].items()]
            except (KeyError, TypeError, ValueError, IndexError, AttributeError):
                skipped += 1
                continue
            for key, counts, shared in run_keys:
                tally.add_key(key, counts, shared=shared)
            for entity, counts, written in run_entities:
                tally.add_entity(entity, counts, written)
        if skipped:
            logger.warning("run items skipped", window=format_ts(start_ms), skipped=skipped)
        return tally.load()

    def _query_all(self, partition_keys: Iterable[str]) -> Iterable[Mapping[str, Any]]:
        for pk in partition_keys:
            request: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": pk}},
                "ConsistentRead": True,
            }
            while True:
                page = self._db.query(**request)
                yield from page.get("Items", [])
                if not page.get("LastEvaluatedKey"):
                    break
                request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # -- window-close claims -------------------------------------------------------------------

    def _claim_key(self, start_ms: int) -> dict[str, Any]:
        return {"pk": {"S": f"close#{format_ts(start_ms)}"}, "sk": {"S": "window"}}

    def claim_close(self, start_ms: int, owner: str, now_ms: int, lease_ms: int) -> bool:
        """True when this caller now owns the judging of the window (no one did, or a lease ran out)."""
        item = {
            **self._claim_key(start_ms),
            "state": {"S": CLAIMED},
            "owner": {"S": owner},
            "lease_until": {"N": str(now_ms + lease_ms)},
            "expires_at": {"N": str((now_ms + COUNTER_RETENTION_MS) // 1000)},
        }
        return self._conditional(
            self._db.put_item,
            TableName=self._table,
            Item=item,
            ConditionExpression="attribute_not_exists(pk) OR (#state = :claimed AND lease_until < :now)",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={":claimed": {"S": CLAIMED}, ":now": {"N": str(now_ms)}},
        )

    def finish_close(
        self, start_ms: int, owner: str, now_ms: int, summary: str, *, observed: bool, judged: Mapping[str, int]
    ) -> bool:
        """Mark the window judged. ``observed``: it had counted writes (history for scale-downs);
        ``judged``: the write units of the entities with their own count, kept for the scale-downs
        of later windows (in pages, put before the claim names how many there are)."""
        ranked = sorted(judged.items())
        pages = [ranked[i : i + JUDGED_PAGE_ENTITIES] for i in range(0, len(ranked), JUDGED_PAGE_ENTITIES)]
        expires = str((now_ms + COUNTER_RETENTION_MS) // 1000)
        for number, page in enumerate(pages):
            self._db.put_item(
                TableName=self._table,
                Item={
                    "pk": {"S": f"close#{format_ts(start_ms)}"},
                    "sk": {"S": f"entities#{number:03d}"},
                    "load": {"S": json.dumps(dict(page), separators=(",", ":"))},
                    "expires_at": {"N": expires},
                },
            )
        return self._conditional(
            self._db.update_item,
            TableName=self._table,
            Key=self._claim_key(start_ms),
            UpdateExpression=(
                "SET #state = :done, summary = :summary, closed_at = :now, observed = :observed, pages = :pages"
            ),
            ConditionExpression="#owner = :me",
            ExpressionAttributeNames={"#state": "state", "#owner": "owner"},
            ExpressionAttributeValues={
                ":done": {"S": DONE},
                ":summary": {"S": summary[:4000] or "-"},
                ":now": {"N": str(now_ms)},
                ":me": {"S": owner},
                ":observed": {"BOOL": observed},
                ":pages": {"N": str(len(pages))},
            },
        )

    def release_close(self, start_ms: int, owner: str) -> bool:
        """Give a claim back (judging failed) so the next invocation can retry at once."""
        return self._conditional(
            self._db.delete_item,
            TableName=self._table,
            Key=self._claim_key(start_ms),
            ConditionExpression="#owner = :me AND #state = :claimed",
            ExpressionAttributeNames={"#owner": "owner", "#state": "state"},
            ExpressionAttributeValues={":me": {"S": owner}, ":claimed": {"S": CLAIMED}},
        )

    def read_history(self, starts: Sequence[int], width_ms: int) -> dict[int, WindowLoad]:
        """The judged load (entities with their own count) of each window of ``starts`` that was
        judged with writes counted in it. A window not judged, judged without writes, or whose
        pages cannot be read is left out: it can only hold a scale-down back."""
        by_label = {format_ts(s): s for s in starts}
        pages: dict[int, int] = {}
        for item in self._batch_get([self._claim_key(s) for s in starts]):
            start = by_label.get(_s(item, "pk").removeprefix("close#"))
            if start is not None and item.get("state", {}).get("S") == DONE and item.get("observed", {}).get("BOOL"):
                pages[start] = int(item.get("pages", {}).get("N", "0"))
        keys = [
            {"pk": {"S": f"close#{format_ts(s)}"}, "sk": {"S": f"entities#{n:03d}"}}
            for s, count in pages.items()
            for n in range(count)
        ]
        tallies = {s: WindowTally(s, width_ms) for s in pages}
        found: dict[int, int] = dict.fromkeys(pages, 0)
        for item in self._batch_get(keys):
            start = by_label[_s(item, "pk").removeprefix("close#")]
            try:
                judged = [(str(e), _counts([wcu, 0, 0])) for e, wcu in json.loads(_s(item, "load")).items()]
            except (KeyError, TypeError, ValueError, AttributeError):
                logger.warning("a judged window's page is unreadable", window=format_ts(start))
                continue
            for entity, counts in judged:
                tallies[start].add_entity(entity, counts, ())
            found[start] += 1
        return {s: tally.load() for s, tally in tallies.items() if found[s] == pages[s]}

    # -- alert cooldowns ------------------------------------------------------------------------

    def claim_alert(self, subject: str, owner: str, now_ms: int, cooldown_ms: int) -> bool:
        """True when no alert for ``subject`` went out within the cooldown: this caller sends it."""
        item = {
            "pk": {"S": "alert"},
            "sk": {"S": subject},
            "until": {"N": str(now_ms + cooldown_ms)},
            "owner": {"S": owner},
            "expires_at": {"N": str((now_ms + cooldown_ms + COUNTER_RETENTION_MS) // 1000)},
        }
        return self._conditional(
            self._db.put_item,
            TableName=self._table,
            Item=item,
            ConditionExpression="attribute_not_exists(pk) OR #until <= :now",
            ExpressionAttributeNames={"#until": "until"},
            ExpressionAttributeValues={":now": {"N": str(now_ms)}},
        )

    def release_alert(self, subject: str, owner: str) -> bool:
        """Undo a cooldown whose message could not be sent, so a later window sends it."""
        return self._conditional(
            self._db.delete_item,
            TableName=self._table,
            Key={"pk": {"S": "alert"}, "sk": {"S": subject}},
            ConditionExpression="#owner = :me",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues={":me": {"S": owner}},
        )

    # -- internals -------------------------------------------------------------------------------

    def _conditional(self, call: Callable[..., Mapping[str, Any]], **request: Any) -> bool:
        try:
            call(**request)
        except ClientError as exc:
            if error_code(exc) == CONDITION_FAILED:
                return False
            raise
        return True

    def _batch_get(self, keys: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The items of ``keys`` (consistent reads), the unprocessed ones asked again with backoff;
        :class:`ControlTableBusy` when some stay unprocessed ``_BATCH_GET_ATTEMPTS`` calls."""
        found: list[Mapping[str, Any]] = []

        def keep(response: Mapping[str, Any]) -> None:
            found.extend(response.get("Responses", {}).get(self._table, []))

        batch_get(self._db, self._table, keys, retry=self._retry, give_up=_busy, on_response=keep, consistent=True)
        return found


class ControlTableBusy(Exception):  # noqa: N818 - reads as the condition
    """BatchGetItem kept returning unprocessed keys (the control table is throttled)."""


def _busy(pending: list[Mapping[str, Any]], _why: str) -> None:
    raise ControlTableBusy(f"{len(pending)} key(s) stayed unprocessed after {_BATCH_GET_ATTEMPTS} tries")


def _s(item: Mapping[str, Any], name: str) -> str:
    value = item[name]["S"]
    if not isinstance(value, str):
        raise TypeError(name)
    return value


def _counts(values: Sequence[object]) -> list[int]:
    counts = [v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
    if len(counts) != len(values) or len(counts) != 3:
        raise ValueError("a load is three whole numbers")
    return counts
