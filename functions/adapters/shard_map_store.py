"""The shard-map store: the versioned shard map in the control table, read and changed safely.

Items, all in partition ``shardmap`` (the only control-table partition ingest and
query may read)::

    pk = "shardmap", sk = "current"                         the head
    map         S   JSON of ShardMap.to_dict(), with "entities" {} when they are in pages
    pages       L   sort keys of the pages holding the entities (absent: they are in "map")
    version     N   the map's version; the optimistic-concurrency token
    updated_at  S   when it was last written (RFC 3339)
    reason      S   why (for the humans reading the table)

    pk = "shardmap", sk = "page#<version>#<nnn>#<token>"   a page (never changed once written)
    entities    S   JSON {entity: history}, the entities whose stable hash mod len(pages) is nnn
    version     N   the version of the head it was written for

A map whose JSON fits in :data:`PAGE_BYTES` is the head alone (the form every
map had before pages existed, which is still read as it is). A larger one puts
its entities in 2, 4, 8 ... pages, each at most :data:`PAGE_BYTES`, so no item
comes near DynamoDB's 400 KB. A change rewrites only the pages whose entities
changed; the others keep their sort keys. A page's content never changes under
its key, so a reader keeps the pages it has read and, on each refresh, reads
the head and only the pages it has not seen (:meth:`ShardMapStore.load`).

**Reading** is a strongly consistent GetItem of the head (and of each page not
yet held), then full validation: JSON, ``ShardMap.from_dict``, the ``version``
attribute equal to the map's, the bucket equal to the configured one, no
entity in two places. Anything off is a :class:`MalformedShardMap` naming the
table and the fault: a caller keeps no half-parsed map. ``load`` then answers
with the last good map the store read or wrote (metric ``ShardMapFallbacks``,
alarmed), so a broken entry does not fail every batch; with none (a cold start)
it raises. A page gone between reading the head and the page (a writer
replaced it) sends the reader back to the new head.

**Bootstrap**: an absent head is created from the configured initial map
(``SHARDS``, ``BUCKET``) with ``attribute_not_exists``, so concurrent cold
starts agree on one. From then on the stored map is the truth and ``SHARDS``
is ignored: changing it later cannot move old data out of readers' sight.

**Changing** (:meth:`ShardMapStore.apply`): read, compute the new map with a
pure function of the map read, fold what is past retention
(:class:`Compaction`), check it only adds changes in the future (the past still
readable is never rewritten, whatever the function did), put the new pages
(fresh sort keys), then put the head on the condition that the version is
still the one read. A head put that raises may have landed (a 500 or a
dropped connection after DynamoDB applied it; botocore's retry then meets the
condition our own put changed), so the head is read back: the item we put is a
success. Pages are deleted only once a stored head shows they cannot be named:
it has reached their version without naming them (a head put is conditioned
on the version stored, and versions only grow). Otherwise a
``ConditionalCheckFailedException`` means another writer got there first: read
again and re-apply, with jittered backoff, up to ``max_attempts`` times. Once
the head lands, the pages it no longer names are deleted. Two detectors racing
therefore leave one map containing both of their changes, each judged against
the other's. A malformed stored map is replaced from the writer's last good
map when that is at least the version the broken head claims, and refused
otherwise. (A writer that dies between its pages and its head, or before it
learns whether its head landed, leaves pages no head names; they are never read.)

Callers: the hot-key Lambda (load and apply); every Lambda reads through
:func:`shard_map_source`, the one place a function's shard-map source is built.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from adapters.clients import CONDITION_FAILED, client, error_code
from adapters.observability import logger, metrics
from adapters.retry import Backoff
from adapters.settings import CommonSettings, SettingsError
from adapters.shard_map_source import CachedShardMap, ShardMapSource, StaticShardMap
from keydesign import ConfigError, ShardMap, format_ts, shard_of
from keydesign.shardmap import Change

SHARD_MAP_PARTITION = "shardmap"
SHARD_MAP_KEY: Mapping[str, Mapping[str, str]] = {"pk": {"S": SHARD_MAP_PARTITION}, "sk": {"S": "current"}}
#: The head holding the whole map, or one page of its entities, stays under this many bytes of JSON.
PAGE_BYTES = 64 * 1024
#: Pages at most (16 MB of map); the head names them all in a few KB.
MAX_PAGES = 256
#: Page reads in flight at once (a cold start reads every page).
_PAGE_READS = 8
#: Times a reader goes back to a new head after a page it named was replaced.
_HEAD_ATTEMPTS = 3
#: Between attempts that lost the race: 50 ms, doubling, at most 3.2 s (full jitter).
_BACKOFF = Backoff(base_ms=50, max_delay_ms=3_200)


class ShardMapStoreError(Exception):
    """The shard map cannot be read or changed."""


class MalformedShardMap(ShardMapStoreError):  # noqa: N818 - reads as the condition
    """The stored entry is not a valid shard map. Nothing is written over it but a map derived
    from a good one at least as new (:meth:`ShardMapStore.apply`)."""

    def __init__(self, table: str, reason: str) -> None:
        self.table = table
        self.reason = reason
        super().__init__(f"shard map in table {table} (pk=shardmap, sk=current) is refused: {reason}")


class ShardMapConflict(ShardMapStoreError):  # noqa: N818 - reads as the condition
    """Other writers kept changing the map: no write landed in ``attempts`` tries."""


class PastRewrite(ShardMapStoreError):  # noqa: N818 - reads as the condition
    """A change would alter the map at or before now; refused before anything is written."""


class _PageGone(Exception):  # noqa: N818 - reads as the condition
    """A page the head named is not there (a newer head replaced it)."""


class ShardMapItemApi(Protocol):
    """The DynamoDB client methods the store calls (the real client, a fake or a fault injector)."""

    def get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def put_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def delete_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Compaction:
    """What the map may forget: every change in force ``keep_ms`` before now is folded into the
    state it left (``ShardMap.compacted``). ``keep_ms`` must cover the oldest reading any
    function may still write or read (``RETENTION``) plus a margin for clocks; ``entity_default``
    is the layout's count for an entity without its own (1 in hybrid, None: the global N)."""

    keep_ms: int
    entity_default: int | None

    def horizon(self, now_ms: int) -> int:
        return now_ms - self.keep_ms


@dataclass(frozen=True, slots=True)
class Applied:
    """The outcome of :meth:`ShardMapStore.apply`."""

    shard_map: ShardMap
    changed: bool
    attempts: int


@dataclass(frozen=True, slots=True)
class _Stored:
    """What a change replaces: the map, the sort keys of the pages its head names (in page
    order), and the head's version. ``fault`` is set when the head is malformed and
    ``shard_map`` is this store's last good map instead: then no page of it is reused."""

    shard_map: ShardMap
    pages: tuple[str, ...]
    version: int
    fault: str | None = None


class ShardMapStore:
    """The shard map in the control table. Thread-safe: its one piece of state, the pages
    already read, is replaced whole under a lock."""

    def __init__(
        self,
        dynamodb: ShardMapItemApi,
        table: str,
        initial: ShardMap,
        *,
        compaction: Compaction | None = None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 8,
    ) -> None:
        self._db = dynamodb
        self._table = table
        self._initial = initial
        self._compaction = compaction
        self._clock_ms = clock_ms
        self._sleep = sleep
        self._max_attempts = max_attempts
        self._lock = threading.Lock()
        # Pages read (sort key -> their JSON), and the last map assembled (by its head's JSON and pages).
        self._pages: dict[str, str] = {}
        self._last: tuple[str, int, tuple[str, ...], ShardMap] | None = None
        # Pages this store put, or whose head it tried to replace, that no head may name once one of
        # this version or later is stored without them (sort key -> version); see _settle.
        self._unsettled: dict[str, int] = {}

    @classmethod
    def from_settings(cls, common: CommonSettings, dynamodb: ShardMapItemApi | None = None) -> ShardMapStore:
        """The store of ``CONTROL_TABLE``, bootstrapping with ``SHARDS`` and ``BUCKET`` (it never compacts)."""
        if common.control_table is None:
            raise SettingsError("CONTROL_TABLE", "is required to read the shard map from its store")
        initial = ShardMap.initial(common.layout.bucket, common.shards)
        return cls(dynamodb if dynamodb is not None else client("dynamodb"), common.control_table, initial)

    # -- reading -------------------------------------------------------------------------

    def peek(self) -> ShardMap | None:
        """The stored map, or None when there is none yet. Never writes."""
        stored = self._read()
        return None if stored is None else stored.shard_map

    def load(self, *, bootstrap: bool = True) -> ShardMap:
        """The stored map. When there is none yet: the initial map, stored first
        (``bootstrap``), or just returned (read-only callers; no PutItem needed).

        When the stored map is malformed: the last good map this store read or wrote,
        with an error logged and metric ``ShardMapFallbacks`` (one per load that fell
        back); with none (a cold start), :class:`MalformedShardMap`."""
        try:
            found = self.peek()
        except MalformedShardMap as exc:
            last = self._last
            if last is None:
                raise
            logger.error(
                "shard map refused; working from the last good map this function read",
                table=self._table,
                fault=exc.reason,
                version=last[3].version,
            )
            metrics.add_metric(name="ShardMapFallbacks", unit=MetricUnit.Count, value=1)
            return last[3]
        if found is not None:
            return found
        if not bootstrap:
            return self._initial
        try:
            self._put(self._initial, None, reason="bootstrap from SHARDS and BUCKET")
            logger.info("shard map bootstrapped", table=self._table, shards=self._initial.global_history[0].shards)
            return self._initial
        except ClientError as exc:
            if error_code(exc) != CONDITION_FAILED:
                raise
        # Another cold start stored it between our read and our write: theirs is the map.
        found = self.peek()
        if found is None:
            raise ShardMapStoreError(f"shard map in table {self._table} vanished while being bootstrapped")
        return found

    def _read(self) -> _Stored | None:
        for _ in range(_HEAD_ATTEMPTS):
            head = self._get(dict(SHARD_MAP_KEY))
            if head is None:
                return None
            try:
                return self._assemble(head)
            except _PageGone:
                continue
        raise MalformedShardMap(self._table, f"pages named by the head kept vanishing ({_HEAD_ATTEMPTS} reads)")

    def _assemble(self, head: Mapping[str, Any]) -> _Stored:
        raw_map, raw_version, raw_pages = head.get("map"), head.get("version"), head.get("pages", {"L": []})
        if not isinstance(raw_map, Mapping) or not isinstance(raw_map.get("S"), str):
            raise MalformedShardMap(self._table, "attribute 'map' must be a string holding the map's JSON")
        if not isinstance(raw_version, Mapping) or not isinstance(raw_version.get("N"), str):
            raise MalformedShardMap(self._table, "attribute 'version' must be a number")
        try:
            version = int(raw_version["N"])
        except ValueError:
            raise MalformedShardMap(self._table, f"version {raw_version['N']!r} is not a whole number") from None
        pages = _page_keys(raw_pages)
        if pages is None:
            raise MalformedShardMap(self._table, "attribute 'pages' must be a list of page sort keys")
        last = self._last
        if last is not None and last[:3] == (raw_map["S"], version, pages):
            return _Stored(last[3], pages, version)
        try:
            data = json.loads(raw_map["S"])
        except ValueError as exc:
            raise MalformedShardMap(self._table, f"attribute 'map' is not JSON ({exc})") from None
        texts = self._page_texts(pages)
        if pages and isinstance(data, dict):
            data["entities"] = self._merge(data.get("entities"), pages, texts)
        try:
            shard_map = ShardMap.from_dict(data)
        except ConfigError as exc:
            raise MalformedShardMap(self._table, str(exc)) from None
        if shard_map.version != version:
            raise MalformedShardMap(
                self._table, f"attribute version {version} does not match the map's own version {shard_map.version}"
            )
        if shard_map.bucket != self._initial.bucket:
            raise MalformedShardMap(
                self._table,
                f"the stored map uses {shard_map.bucket.spec} buckets but BUCKET is {self._initial.bucket.spec}; "
                "keys built with one cannot be found with the other",
            )
        with self._lock:
            self._pages = dict(zip(pages, texts, strict=True))
            self._last = (raw_map["S"], version, pages, shard_map)
        return _Stored(shard_map, pages, version)

    def _page_texts(self, pages: Sequence[str]) -> list[str]:
        """Each page's JSON: from the pages already read, the others fetched (several at once)."""
        held = self._pages
        missing = [sk for sk in pages if sk not in held]
        if len(missing) > 1:
            with ThreadPoolExecutor(max_workers=min(_PAGE_READS, len(missing))) as pool:
                fetched = dict(zip(missing, pool.map(self._page_text, missing), strict=True))
        else:
            fetched = {sk: self._page_text(sk) for sk in missing}
        return [held[sk] if sk in held else fetched[sk] for sk in pages]

    def _page_text(self, sk: str) -> str:
        item = self._get({"pk": {"S": SHARD_MAP_PARTITION}, "sk": {"S": sk}})
        if item is None:
            raise _PageGone(sk)
        text = item.get("entities", {}).get("S")
        if not isinstance(text, str):
            raise MalformedShardMap(self._table, f"page {sk}: attribute 'entities' must be a string of JSON")
        return text

    def _merge(self, inline: object, pages: Sequence[str], texts: Sequence[str]) -> dict[str, object]:
        merged: dict[str, object] = dict(inline) if isinstance(inline, Mapping) else {}
        if merged:
            raise MalformedShardMap(self._table, "a paged map must not hold entities in the head too")
        for sk, text in zip(pages, texts, strict=True):
            try:
                entities = json.loads(text)
            except ValueError as exc:
                raise MalformedShardMap(self._table, f"page {sk} is not JSON ({exc})") from None
            if not isinstance(entities, dict):
                raise MalformedShardMap(self._table, f"page {sk} must be an object of entity id to history")
            twice = sorted(set(entities) & set(merged))
            if twice:
                raise MalformedShardMap(self._table, f"entity {twice[0]!r} is in two pages")
            merged.update(entities)
        return merged

    def _get(self, key: Mapping[str, Any]) -> Mapping[str, Any] | None:
        response = self._db.get_item(TableName=self._table, Key=key, ConsistentRead=True)
        return response.get("Item")

    # -- changing ---------------------------------------------------------------------------

    def apply(self, change: Callable[[ShardMap], ShardMap], *, reason: str) -> Applied:
        """Apply ``change`` (a pure function of the map it is given) with optimistic concurrency,
        folding what is past retention when the store compacts.

        Raises :class:`MalformedShardMap` when the stored entry is invalid,
        :class:`PastRewrite` when ``change`` alters the past, and
        :class:`ShardMapConflict` when no write landed in ``max_attempts`` tries.
        """
        for attempt in range(1, self._max_attempts + 1):
            stored = self._replaced()
            current = stored.shard_map if stored is not None else self._initial
            now_ms = self._clock_ms()
            proposed = change(current)
            why = reason
            if self._compaction is not None:
                horizon = self._compaction.horizon(now_ms)
                folded = proposed.compacted(horizon, entity_default=self._compaction.entity_default)
                if not _same(folded, proposed):
                    why = f"{reason} (changes in force before {format_ts(horizon)} folded)"
                proposed = folded
            fault = stored.fault if stored is not None else None
            if fault is None and (proposed is current or _same(proposed, current)):
                return Applied(current, changed=False, attempts=attempt)
            check_future_only(current, proposed, now_ms, compaction=self._compaction)
            if fault is not None:
                why = f"{why} (replaces a malformed map: {fault})"
            new = replace(proposed, version=max(current.version, stored.version if stored else 0) + 1)
            try:
                self._put(new, stored, reason=why)
            except ClientError as exc:
                if error_code(exc) != CONDITION_FAILED:
                    raise
                logger.info("shard map changed under us; re-reading", table=self._table, attempt=attempt)
                if attempt < self._max_attempts:
                    self._sleep(_BACKOFF.delay_s(attempt))
                continue
            return Applied(new, changed=True, attempts=attempt)
        raise ShardMapConflict(
            f"shard map in table {self._table}: {self._max_attempts} attempts lost the race to other writers"
        )

    def _replaced(self) -> _Stored | None:
        """What a change replaces: the stored map; or, when it is malformed, this store's last good
        map, provided it is at least the version the head claims (a newer head may hold changes
        readers already follow, which only an operator can restore)."""
        try:
            stored = self._read()
        except MalformedShardMap as exc:
            head = self._get(dict(SHARD_MAP_KEY))
            version = _version_of(head)
            last = self._last
            if head is None or version is None:
                why = "its version cannot be read"
            elif last is None:
                why = "this writer holds no good map to replace it with"
            elif version > last[3].version:
                why = f"it is version {version}, newer than the last good map this writer read ({last[3].version})"
            else:
                pages = _page_keys(head.get("pages", {"L": []})) or ()
                return _Stored(last[3], pages, version, fault=exc.reason)
            raise MalformedShardMap(self._table, f"{exc.reason}; not replaced: {why}") from None
        if stored is not None:
            self._settle(stored.version, stored.pages)
        return stored

    # -- internals -------------------------------------------------------------------------

    def _put(self, shard_map: ShardMap, previous: _Stored | None, *, reason: str) -> None:
        """Put ``shard_map``'s new pages, then its head on the condition that ``previous`` is still
        stored (absent: none is). A head put that raised but landed (its response was lost, and
        botocore's retry met the condition our own put had changed) is a success: the stored head
        is read back and compared. Pages are deleted only once a head is seen that cannot name them."""
        data = shard_map.to_dict()
        # Validate what we are about to write exactly as a reader will parse it.
        ShardMap.from_dict(json.loads(json.dumps(data)))
        entities: dict[str, object] = data.pop("entities")  # type: ignore[assignment]
        old_pages = previous.pages if previous is not None else ()
        # A malformed head's pages may be gone or garbage: none is reused.
        reusable = old_pages if previous is not None and previous.fault is None else ()
        texts = self._layout(data, entities, len(old_pages))
        pages: list[str] = []
        if texts is None:
            data["entities"] = entities
        else:
            data["entities"] = {}
            held = self._pages
            token = secrets.token_hex(4)
            for number, text in enumerate(texts):
                reuse = reusable[number] if len(texts) == len(reusable) else None
                if reuse is not None and held.get(reuse) == text:
                    pages.append(reuse)
                    continue
                sk = f"page#{shard_map.version:010d}#{number:03d}#{token}"
                self._put_page(sk, text, shard_map.version)
                pages.append(sk)
        item: dict[str, Any] = {
            **SHARD_MAP_KEY,
            "map": {"S": _dumps(data)},
            "version": {"N": str(shard_map.version)},
            "updated_at": {"S": format_ts(self._clock_ms())},
            "reason": {"S": reason[:1000] or "unspecified"},
        }
        if pages:
            item["pages"] = {"L": [{"S": sk} for sk in pages]}
        with self._lock:
            self._unsettled.update((sk, shard_map.version) for sk in old_pages if sk not in pages)
        try:
            if previous is None:
                self._db.put_item(TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)")
            else:
                self._db.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression="#v = :expected",
                    ExpressionAttributeNames={"#v": "version"},
                    ExpressionAttributeValues={":expected": {"N": str(previous.version)}},
                )
        except Exception as exc:
            if not self._landed(item, exc):
                raise
        self._settle(shard_map.version, pages)
        with self._lock:
            self._pages = dict(zip(pages, texts or (), strict=True))
            self._last = (item["map"]["S"], shard_map.version, tuple(pages), shard_map)

    def _landed(self, item: Mapping[str, Any], error: Exception) -> bool:
        """Whether the head put that raised ``error`` is stored after all (read back, consistently).
        When another head is stored, the pages it cannot name are deleted."""
        try:
            head = self._get(dict(SHARD_MAP_KEY))
        except Exception:
            logger.warning("could not read the shard-map head back after its put failed; its pages are kept")
            return False
        if head == item:
            logger.warning("the shard-map head put raised but had landed", table=self._table, error=str(error))
            return True
        if head is not None:
            self._settle(_version_of(head), _page_keys(head.get("pages", {"L": []})) or ())
        return False

    def _settle(self, version: int | None, named: Collection[str]) -> None:
        """Given a stored head (its version and the pages it names), settle the pages tracked for that
        version or an earlier one: those it names are its own now, the others are deleted. No head can
        name them again: a head put is conditioned on the version stored (and versions only grow), so
        only one built on this head can land, and it reuses pages of this head alone."""
        if version is None:
            return
        with self._lock:
            settled = [sk for sk, v in self._unsettled.items() if v <= version]
            for sk in settled:
                del self._unsettled[sk]
        self._delete_pages([sk for sk in settled if sk not in named])

    def _layout(self, data: dict[str, object], entities: dict[str, object], old_count: int) -> list[str] | None:
        """The pages' JSON for ``entities`` (None: they fit in the head). The page count stays
        as it was while its pages fit and are more than a quarter full; otherwise it is the
        smallest that fits, so a map near a threshold does not rewrite every page at each change."""
        whole = len(_dumps({**data, "entities": entities}))
        parts = {e: len(_dumps({e: h})) for e, h in entities.items()}
        total = sum(parts.values())

        def pages_of(count: int) -> list[str] | None:
            if count == 0:
                return [] if whole <= PAGE_BYTES else None
            groups: list[dict[str, object]] = [{} for _ in range(count)]
            sizes = [0] * count
            for entity, size in parts.items():
                index = shard_of(entity, count)
                groups[index][entity] = entities[entity]
                sizes[index] += size
            if max(sizes) > PAGE_BYTES:  # the sum of the parts bounds each page's JSON
                return None
            return [_dumps(group) for group in groups]

        if old_count and total > old_count * PAGE_BYTES // 4:
            kept = pages_of(old_count)
            if kept is not None:
                return kept
        for count in (0, *(1 << k for k in range(MAX_PAGES.bit_length()))):
            laid = pages_of(count)
            if laid is not None:
                return laid or None
        raise ShardMapStoreError(
            f"shard map version {data['version']}: {len(entities):,} entities ({total:,} bytes) do not fit in "
            f"{MAX_PAGES} pages of {PAGE_BYTES:,} bytes"
        )

    def _put_page(self, sk: str, text: str, version: int) -> None:
        with self._lock:
            self._unsettled[sk] = version
        try:
            self._db.put_item(
                TableName=self._table,
                Item={
                    "pk": {"S": SHARD_MAP_PARTITION},
                    "sk": {"S": sk},
                    "entities": {"S": text},
                    "version": {"N": str(version)},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            # Already there: put by an attempt of this call whose response was lost before botocore's
            # retry (the key's token is this put's), or, once in 4 billion, another writer's; either
            # serves if it holds the same entities.
            if error_code(exc) != CONDITION_FAILED:
                raise
            found = self._get({"pk": {"S": SHARD_MAP_PARTITION}, "sk": {"S": sk}})
            if found is None or found.get("entities") != {"S": text}:
                raise

    def _delete_pages(self, pages: Sequence[str]) -> None:
        for sk in pages:
            try:
                self._db.delete_item(TableName=self._table, Key={"pk": {"S": SHARD_MAP_PARTITION}, "sk": {"S": sk}})
            except Exception:
                # Unnamed by any head, it is never read: a leftover, not a fault.
                logger.warning("could not delete a shard-map page no head names", table=self._table, page=sk)


def check_future_only(old: ShardMap, new: ShardMap, now_ms: int, *, compaction: Compaction | None = None) -> None:
    """Raise :class:`PastRewrite` unless ``new`` equals ``old`` up to ``now_ms`` and only
    differs after it: every history keeps its entries at or before now, unchanged, and
    no entity disappears. With ``compaction``, both maps are compared folded at its
    horizon: what took effect before it may be forgotten, nothing after."""
    if new.bucket != old.bucket:
        raise PastRewrite(f"the bucket may not change ({old.bucket.spec} -> {new.bucket.spec})")
    if compaction is not None:
        horizon = compaction.horizon(now_ms)
        old = old.compacted(horizon, entity_default=compaction.entity_default)
        new = new.compacted(horizon, entity_default=compaction.entity_default)
    _check_history("global", old.global_history, new.global_history, now_ms)
    for entity, history in old.entity_history.items():
        _check_history(f"entities.{entity}", history, new.entity_history.get(entity, ()), now_ms)
    for entity, history in new.entity_history.items():
        if entity not in old.entity_history:
            _check_history(f"entities.{entity}", (), history, now_ms)


def _check_history(name: str, old: Sequence[Change], new: Sequence[Change], now_ms: int) -> None:
    past_old = [c for c in old if c.effective_from_ms <= now_ms]
    past_new = [c for c in new if c.effective_from_ms <= now_ms]
    if past_old != past_new:
        raise PastRewrite(f"{name}: the change would alter the map at or before {format_ts(now_ms)}")


def _same(a: ShardMap, b: ShardMap) -> bool:
    return a.global_history == b.global_history and dict(a.entity_history) == dict(b.entity_history)


def _page_keys(raw: object) -> tuple[str, ...] | None:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("L"), list):
        return None
    keys = tuple(v.get("S") if isinstance(v, Mapping) else None for v in raw["L"])
    if not all(isinstance(k, str) and k.startswith("page#") for k in keys) or len(set(keys)) != len(keys):
        return None
    return keys  # type: ignore[return-value]


def _version_of(head: Mapping[str, Any] | None) -> int | None:
    raw = head.get("version") if head is not None else None
    text = raw.get("N") if isinstance(raw, Mapping) else None
    try:
        return int(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _dumps(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def shard_map_source(
    common: CommonSettings,
    *,
    bootstrap: bool,
    store: ShardMapStore | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ShardMapSource:
    """The shard map a function writes or plans with: the store in ``CONTROL_TABLE``
    read through a cache no older than ``SHARD_MAP_CACHE_TTL``, or, without a
    control table, the static initial map (``SHARDS``).

    Writers ``bootstrap``: when the table holds no map yet they store the
    initial one, so the first writer and the first detector agree on it. A
    reader never writes: until a writer stores a map, it plans with the
    initial one, which is what the writer would store. A failed refresh after
    the cache expires raises (the batch or request fails): writing with a map
    that may be stale could put a split entity where readers do not look. A
    malformed stored map is the exception: :meth:`ShardMapStore.load` answers
    with the last good map it holds, since retrying would meet it again.
    """
    if common.control_table is None:
        return StaticShardMap(ShardMap.initial(common.layout.bucket, common.shards))
    source = store if store is not None else ShardMapStore.from_settings(common)
    return CachedShardMap(lambda: source.load(bootstrap=bootstrap), common.shard_map_cache_ttl_ms, clock=clock)
