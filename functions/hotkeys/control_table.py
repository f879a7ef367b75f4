"""The hot-key function's state in the control table: shared load counters, window-close
claims and alert cooldowns. (The shard map, in the same table, is ``adapters.shard_map_store``.)

Item layout (every key a string; ``expires_at`` is epoch seconds for the table's TTL)::

    counter   pk = load#<window start>#<cc>   sk = entity#<entity> | key#<partition key>
              wcu, writes, deletes (N, atomic ADD by every invocation)
              keys (SS, entities: the partition keys written), shared (BOOL, keys: a base key)
              window_ms, expires_at
    claim     pk = close#<window start>       sk = window
              state (claimed | done), owner, lease_until, summary, observed (BOOL), expires_at
    cooldown  pk = alert                      sk = entity#<entity> | key#<key family>
              until, owner, expires_at

``<cc>`` is ``shard_of(sk, counter_shards)``: every invocation of every stream
shard adds to the same window's counters, so they are write-sharded like the
readings themselves and no counter partition key becomes the hot key.
Counters are added with ``ADD``, which DynamoDB applies atomically, so
concurrent invocations never lose each other's counts.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from botocore.exceptions import ClientError

from adapters.observability import logger
from hotkeys.detector import Load, WindowLoad
from keydesign import format_ts, shard_of

CLAIMED = "claimed"
DONE = "done"
_CONDITION_FAILED = "ConditionalCheckFailedException"
_BATCH_GET_KEYS = 100
_BATCH_GET_ATTEMPTS = 6


class ControlTableApi(Protocol):
    """The DynamoDB client methods used here (the real client, a fake or a fault injector)."""

    def update_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def put_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def delete_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def query(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def batch_get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class CounterReport:
    """What became of one window's counter writes: the sort keys that failed, and why."""

    written: int
    failed: Mapping[str, str]


def entity_counter(entity: str) -> str:
    return f"entity#{entity}"


def key_counter(partition_key: str) -> str:
    return f"key#{partition_key}"


class ControlTable:
    """Counters, claims and cooldowns. Thread-safe; one instance per container."""

    def __init__(
        self,
        dynamodb: ControlTableApi,
        table: str,
        *,
        counter_shards: int,
        retention_ms: int,
        concurrency: int = 8,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._shards = counter_shards
        self._retention_ms = retention_ms
        self._sleep = sleep
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="hotkeys-counter")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # -- counters ---------------------------------------------------------------------------

    def _counter_pk(self, start_ms: int, sk: str) -> str:
        return f"load#{format_ts(start_ms)}#{shard_of(sk, self._shards):02d}"

    def add_counters(self, load: WindowLoad, now_ms: int) -> CounterReport:
        """ADD every key and entity of ``load`` to the window's shared counters, in parallel."""
        expires = str((now_ms + self._retention_ms) // 1000)
        updates: list[tuple[str, dict[str, Any]]] = []
        for entity, entity_load in load.entities.items():
            sk = entity_counter(entity)
            keys = sorted(load.entity_keys.get(entity, ()))
            updates.append((sk, self._counter_update(load, sk, entity_load, expires, keys=keys)))
        for key, key_load in load.keys.items():
            sk = key_counter(key)
            updates.append((sk, self._counter_update(load, sk, key_load, expires, shared=key in load.shared_keys)))
        futures = [(sk, self._pool.submit(self._db.update_item, **request)) for sk, request in updates]
        failed: dict[str, str] = {}
        for sk, future in futures:
            try:
                future.result()
            except ClientError as exc:
                failed[sk] = _code(exc) or "ClientError"
            except Exception as exc:  # a dropped connection, a timeout: the same outcome for the record
                failed[sk] = type(exc).__name__
        return CounterReport(len(updates) - len(failed), MappingProxyType(failed))

    def _counter_update(
        self, load: WindowLoad, sk: str, counted: Load, expires: str, *, keys: Sequence[str] = (), shared: bool = False
    ) -> dict[str, Any]:
        adds = ["#wcu :wcu", "#writes :writes", "#deletes :deletes"]
        sets = ["#window = :window", "#expires = :expires"]
        names = {
            "#wcu": "wcu",
            "#writes": "writes",
            "#deletes": "deletes",
            "#window": "window_ms",
            "#expires": "expires_at",
        }
        values: dict[str, Any] = {
            ":wcu": {"N": str(counted.wcu)},
            ":writes": {"N": str(counted.writes)},
            ":deletes": {"N": str(counted.deletes)},
            ":window": {"N": str(load.width_ms)},
            ":expires": {"N": expires},
        }
        if keys:
            adds.append("#keys :keys")
            names["#keys"] = "keys"
            values[":keys"] = {"SS": list(keys)}
        if shared:
            sets.append("#shared = :shared")
            names["#shared"] = "shared"
            values[":shared"] = {"BOOL": True}
        return {
            "TableName": self._table,
            "Key": {"pk": {"S": self._counter_pk(load.start_ms, sk)}, "sk": {"S": sk}},
            "UpdateExpression": f"ADD {', '.join(adds)} SET {', '.join(sets)}",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def read_window(self, start_ms: int, width_ms: int) -> WindowLoad:
        """Every counter of one window, added up by all invocations: the window's load."""
        items: list[Mapping[str, Any]] = []
        for shard in range(self._shards):
            request: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :pk",
                "ExpressionAttributeValues": {":pk": {"S": f"load#{format_ts(start_ms)}#{shard:02d}"}},
                "ConsistentRead": True,
            }
            while True:
                page = self._db.query(**request)
                items.extend(page.get("Items", []))
                if not page.get("LastEvaluatedKey"):
                    break
                request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return self._window_of(start_ms, width_ms, items)

    def read_entities(self, starts: Sequence[int], entities: Iterable[str], width_ms: int) -> dict[int, WindowLoad]:
        """The counters of ``entities`` in each window of ``starts`` (missing counters are zero load)."""
        sks = [entity_counter(e) for e in sorted(set(entities))]
        keys = [{"pk": {"S": self._counter_pk(s, sk)}, "sk": {"S": sk}} for s in starts for sk in sks]
        items = self._batch_get(keys)
        by_start: dict[int, list[Mapping[str, Any]]] = {s: [] for s in starts}
        prefix_to_start = {format_ts(s): s for s in starts}
        for item in items:
            label = _s(item, "pk").removeprefix("load#").rpartition("#")[0]
            start = prefix_to_start.get(label)
            if start is not None:
                by_start[start].append(item)
        return {s: self._window_of(s, width_ms, found) for s, found in by_start.items()}

    def _window_of(self, start_ms: int, width_ms: int, items: Iterable[Mapping[str, Any]]) -> WindowLoad:
        keys: dict[str, Load] = {}
        entities: dict[str, Load] = {}
        entity_keys: dict[str, frozenset[str]] = {}
        shared: set[str] = set()
        skipped = 0
        for item in items:
            try:
                sk = _s(item, "sk")
                counted = Load(_n(item, "wcu"), _n(item, "writes"), _n(item, "deletes"))
                if _n(item, "window_ms") != width_ms:
                    raise ValueError("window_ms")
            except (KeyError, TypeError, ValueError):
                skipped += 1
                continue
            kind, _, name = sk.partition("#")
            if kind == "entity" and name:
                entities[name] = counted
                entity_keys[name] = frozenset(item.get("keys", {}).get("SS", []))
            elif kind == "key" and name:
                keys[name] = counted
                if item.get("shared", {}).get("BOOL") is True:
                    shared.add(name)
            else:
                skipped += 1
        if skipped:
            logger.warning("counter items skipped", window=format_ts(start_ms), skipped=skipped)
        return WindowLoad(
            start_ms,
            width_ms,
            MappingProxyType(keys),
            MappingProxyType(entities),
            MappingProxyType(entity_keys),
            frozenset(shared),
        )

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
            "expires_at": {"N": str((now_ms + self._retention_ms) // 1000)},
        }
        return self._conditional(
            self._db.put_item,
            TableName=self._table,
            Item=item,
            ConditionExpression="attribute_not_exists(pk) OR (#state = :claimed AND lease_until < :now)",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={":claimed": {"S": CLAIMED}, ":now": {"N": str(now_ms)}},
        )

    def finish_close(self, start_ms: int, owner: str, now_ms: int, summary: str, *, observed: bool) -> bool:
        """Mark the window judged. ``observed``: it had counted writes (history for scale-downs)."""
        return self._conditional(
            self._db.update_item,
            TableName=self._table,
            Key=self._claim_key(start_ms),
            UpdateExpression="SET #state = :done, summary = :summary, closed_at = :now, observed = :observed",
            ConditionExpression="#owner = :me",
            ExpressionAttributeNames={"#state": "state", "#owner": "owner"},
            ExpressionAttributeValues={
                ":done": {"S": DONE},
                ":summary": {"S": summary[:4000] or "-"},
                ":now": {"N": str(now_ms)},
                ":me": {"S": owner},
                ":observed": {"BOOL": observed},
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

    def observed_windows(self, starts: Sequence[int]) -> set[int]:
        """Which of ``starts`` have been judged (state done) with writes counted in them."""
        by_label = {format_ts(s): s for s in starts}
        found = self._batch_get([self._claim_key(s) for s in starts])
        observed: set[int] = set()
        for item in found:
            label = _s(item, "pk").removeprefix("close#")
            if (
                label in by_label
                and item.get("state", {}).get("S") == DONE
                and item.get("observed", {}).get("BOOL") is True
            ):
                observed.add(by_label[label])
        return observed

    # -- alert cooldowns ------------------------------------------------------------------------

    def claim_alert(self, subject: str, owner: str, now_ms: int, cooldown_ms: int) -> bool:
        """True when no alert for ``subject`` went out within the cooldown: this caller sends it."""
        item = {
            "pk": {"S": "alert"},
            "sk": {"S": subject},
            "until": {"N": str(now_ms + cooldown_ms)},
            "owner": {"S": owner},
            "expires_at": {"N": str((now_ms + cooldown_ms + self._retention_ms) // 1000)},
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
            if _code(exc) == _CONDITION_FAILED:
                return False
            raise
        return True

    def _batch_get(self, keys: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        found: list[Mapping[str, Any]] = []
        for offset in range(0, len(keys), _BATCH_GET_KEYS):
            pending: list[Mapping[str, Any]] = list(keys[offset : offset + _BATCH_GET_KEYS])
            for attempt in range(_BATCH_GET_ATTEMPTS):
                response = self._db.batch_get_item(
                    RequestItems={self._table: {"Keys": pending, "ConsistentRead": True}}
                )
                found.extend(response.get("Responses", {}).get(self._table, []))
                pending = list(response.get("UnprocessedKeys", {}).get(self._table, {}).get("Keys", []))
                if not pending:
                    break
                self._sleep(random.uniform(0, min(2.0, 0.05 * (1 << attempt))))
            else:
                raise ControlTableBusy(f"{len(pending)} key(s) stayed unprocessed after {_BATCH_GET_ATTEMPTS} tries")
        return found


class ControlTableBusy(Exception):  # noqa: N818 - reads as the condition
    """BatchGetItem kept returning unprocessed keys (the control table is throttled)."""


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _s(item: Mapping[str, Any], name: str) -> str:
    value = item[name]["S"]
    if not isinstance(value, str):
        raise TypeError(name)
    return value


def _n(item: Mapping[str, Any], name: str) -> int:
    return int(item[name]["N"])
