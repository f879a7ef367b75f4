"""Five changes to moto's speed, not its behaviour (how a table finds, orders, projects and serialises
its items; how a Kinesis shard numbers and reads its records), one to its thread safety (its server
and its in-process mock answer one request at a time), and one to its fidelity (numbers DynamoDB refuses are refused).

* **Order.** moto 5.2's ``Table.all_items`` sorts *every item of the table*
  on every Query and on every Scan page, comparing ``DynamoType`` objects pair
  by pair (each comparison converts both values again). With 30,000 readings
  in the table one Query takes about 0.8 s whatever it returns, and a query API
  page over a split entity makes several. :func:`_all_items` sorts on a key
  computed once per item (the values those comparisons compare:
  ``DynamoType.cast_value``), which orders items exactly as moto does whenever
  a key attribute has one type, as a table's keys always do.
* **Partition.** moto keeps a table's items by partition key, yet a Query on
  the table sorts every item of the table, then keeps its partition's and
  sizes each of them while it checks the sort key condition;
  :func:`_query` has ``all_items`` hand it that partition's items alone, and
  with a string ``BETWEEN`` only those in the range (the same items, in the
  same order: moto's filters would drop the others). The one difference: moto
  ends a page early when an item *past* the range would take it over 1 MB;
  here, as in DynamoDB, it does not. The rollup function's reads of one
  entity-minute each, thousands in the demo, cost what they return rather
  than what the table holds.
* **Projection.** ``Item.project`` turns the whole item into Python values,
  picks the projected paths and serialises them back, for every item a Query
  with a ``ProjectionExpression`` returns: most of the cost of reading a
  partition through moto (the query function always projects). When every
  path is a top-level attribute, :func:`_project` copies just those
  attributes; nested paths still go to moto's own.
* **Serialisation.** moto 5.2 turns a result into JSON by walking botocore's
  output model, value by value: for a Query or Scan page that is every
  attribute of every item, most of what moto spends on a read. An item is
  already DynamoDB JSON, so :func:`_execute_result` lets moto's serialiser do
  everything but the ``Items`` list (status, headers, the other members) and
  writes the items as they are, binary values base64-encoded as the model
  writes a blob (every block of readings is one). A result ``json`` cannot
  write even so goes to moto's own.

* **Kinesis shards.** moto 5.2 numbers a new record by listing every
  sequence number of the shard (``list(records.keys())[-1]``), and answers a
  GetRecords by walking the shard from its first record: both cost what the
  shard holds, every record and every read (an on-demand stream has 4 shards:
  100,000 records make 25,000 a shard). A shard's numbers are 1, 2, 3... in
  the order stored (records are never removed), so :func:`_put_record` takes
  the last number from the end of the map and :func:`_get_records` reads the
  records after the iterator's number by number, as many as asked for: the
  same records, numbers and ``MillisBehindLatest``. A shard whose numbers are
  not that run (or a ``Limit`` below 1, which the API refuses) goes to moto's own.

* **One request at a time.** moto's models are not thread-safe, and its server
  answers requests on threads. Kinesis ``Shard.put_record`` numbers a record
  one past the shard's last and then stores it: two PutRecords at once can
  number two records alike, and the second replaces the first, both
  acknowledged (8 threads putting 16,000 records on moto's server: 72 gone;
  ``tests/integration/local_runtime/test_moto_writes.py`` reproduces it), and a GetRecords
  walking the shard meanwhile fails (``OrderedDict mutated during
  iteration``, an HTTP 500). DynamoDB's item writes race the same way (two
  writes creating one partition each insert it, one item lost; two stream
  records sharing a sequence number; an UpdateItem ``ADD`` losing another).
  :func:`_serialised` runs moto's request dispatch under one lock, so every
  request is atomic, as each AWS call is. moto does its work in Python under
  the interpreter lock anyway: one at a time costs little (docs/local.md).
  The in-process mock (``mock_aws``, the tests') races the same way when a
  function under test writes from several threads (the batch writer's pool):
  :func:`_serialised_mock` takes the same lock around its request handling.

* **Numbers.** moto stores any number its Python ``Decimal`` can hold; DynamoDB refuses one with
  more than 38 significant digits, or a magnitude outside 1E-130 .. 9.9999999999999999999999999999999999999E+125,
  with a ``ValidationException``. :func:`_numbers_checked` refuses them the same way, with DynamoDB's
  messages, in every write request (PutItem, UpdateItem, BatchWriteItem, TransactWriteItems), so a value
  DynamoDB would refuse fails locally too rather than only once deployed.

All are installed while an embedded server runs and undone when the last one
stops. ``tests/unit/local_runtime/test_moto_speedups.py`` checks each against
moto's own on mixed data. If moto changes shape (another version), nothing is
replaced and local mode is only slower.
"""

from __future__ import annotations

import base64
import copy
import decimal
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_log = logging.getLogger(__name__)
_MARK = "_local_runtime_speedup"


def order_key(item: Any) -> Any:
    """The sort key moto's ``all_items`` uses, with each ``DynamoType`` replaced by its ``cast_value``."""
    if item.range_key:
        return (item.hash_key.cast_value, item.range_key.cast_value)
    return item.hash_key.cast_value


_PARTITION = threading.local()  # the partition a Query on this thread reads (see _query)


def _all_items(self: Any) -> list[Any]:
    items: list[Any] = []
    key = getattr(_PARTITION, "key", None)
    hash_sets = self.items.values() if key is None else [self.items[key]] if key in self.items else []
    between = getattr(_PARTITION, "between", None)
    for hash_set in hash_sets:
        if self.range_key_attr and between is not None:
            low, high = between
            items.extend(i for i in hash_set.values() if low <= i.range_key.cast_value <= high)
        elif self.range_key_attr:
            items.extend(hash_set.values())
        else:
            items.append(hash_set)
    return sorted(items, key=order_key)


def _project(self: Any, projection_expressions: list[list[str]]) -> Any:
    if any(len(path) != 1 for path in projection_expressions):
        return _PATCH.originals["project"](self, projection_expressions)
    item = self.__class__.__new__(self.__class__)
    item.hash_key = self.hash_key
    item.range_key = self.range_key
    # An empty LimitedSizeDict, filled without its per-insert size check (the
    # attributes come from an item that passed it), as moto's own deepcopy does.
    item.attrs = self.attrs.__class__()
    for (name,) in projection_expressions:
        value = self.attrs.get(name)
        if value is not None:
            dict.__setitem__(item.attrs, name, copy.deepcopy(value))
    return item


#: The operations whose result carries an ``Items`` list of DynamoDB JSON items.
_ITEM_PAGES = frozenset({"Query", "Scan"})


def _blob(value: object) -> str:
    """A value ``json`` cannot write: in an item, only a binary one (``B``, or a member of ``BS``)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} in a result's items")


def _execute_result(self: Any, context: Any) -> Any:
    original = _PATCH.originals["execute_result"]
    result = self.result
    if context.operation_model.name in _ITEM_PAGES and isinstance(result, dict) and "Items" in result:
        rest = self.__class__.__new__(self.__class__)
        rest._result = {k: v for k, v in result.items() if k != "Items"}
        status, headers, body = original(rest, context)
        try:
            document = json.loads(body)
            document["Items"] = result["Items"]
            return status, headers, json.dumps(document, default=_blob)
        except (TypeError, ValueError):  # a value json cannot write, or a body that is not a JSON object
            pass
    return original(self, context)


def _query(self: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
    original = _PATCH.originals.get("query") or type(self).query  # uninstalled meanwhile: moto's own is back
    index_name = kwargs.get("index_name", args[6] if len(args) > 6 else None)
    if index_name is not None or hash_key is None:
        return original(self, hash_key, *args, **kwargs)
    _PARTITION.key = hash_key
    comparison, bounds = (args[0], args[1]) if len(args) > 1 else (None, [])
    if (
        comparison == "BETWEEN" and len(bounds) == 2 and all(b.type == "S" for b in bounds)
    ):  # the sort key range of a string key
        _PARTITION.between = (bounds[0].cast_value, bounds[1].cast_value)
    try:
        return original(self, hash_key, *args, **kwargs)
    finally:
        _PARTITION.key = _PARTITION.between = None


def _put_record(self: Any, partition_key: str, data: str, explicit_hash_key: str) -> str:
    from moto.kinesis.models import Record  # noqa: PLC0415 - moto is imported only when installed

    sequence = next(reversed(self.records), 0) + 1
    self.records[sequence] = Record(partition_key, data, sequence, explicit_hash_key)
    return str(sequence)


def _get_records(self: Any, last_sequence_id: str, limit: int | None) -> tuple[list[Any], int, int]:
    records = self.records
    last = int(last_sequence_id)
    first, newest = next(iter(records), 1), next(reversed(records), 0)
    if (records and newest - first + 1 != len(records)) or (limit is not None and limit < 1):
        # Not the run 1, 2, 3..., or a limit GetRecords refuses (moto's walk answers it oddly): moto's own
        original = _PATCH.originals.get("get_records") or type(self).get_records  # uninstalled meanwhile: moto's
        return original(self, last_sequence_id, limit)  # type: ignore[no-any-return]
    start = max(last + 1, first)
    stop = newest + 1 if limit is None else min(newest + 1, start + limit)
    results = [records[n] for n in range(start, stop)]
    if not results:
        return results, last, 0
    behind_s = records[newest].created_at - results[-1].created_at
    return results, results[-1].sequence_number, int(behind_s * 1000)


_REQUESTS = threading.RLock()  # held while moto answers one request (re-entrant: a mock inside a server's request)


def _serialised(self: Any, environ: Any, start_response: Any) -> Any:
    """moto's WSGI application (``DomainDispatcherApplication``), answering under the one lock.

    The response it returns is already whole (moto builds the body before it returns)."""
    with _REQUESTS:
        original = _PATCH.originals.get("__call__") or type(self).__call__  # uninstalled meanwhile: moto's own
        return original(self, environ, start_response)


def _serialised_mock(self: Any, request: Any) -> Any:
    """moto's in-process mock (``BotocoreStubber.process_request``), answering under the one lock."""
    with _REQUESTS:
        original = _PATCH.originals.get("process_request") or type(self).process_request  # uninstalled: moto's
        return original(self, request)


#: DynamoDB's number limits (its own messages below): 38 significant digits, and the magnitude's leading
#: digit at 10**-130 .. 10**125.
_NUMBER_DIGITS = 38
_NUMBER_EXPONENTS = range(-130, 126)
_NUMBER_CONTEXT = decimal.Context(prec=1_000, Emax=999_999, Emin=-999_999)


def number_refusal(text: str) -> str | None:
    """What DynamoDB answers a write of the number ``text`` with, or None when it stores it."""
    try:
        value = decimal.Decimal(text)
    except decimal.InvalidOperation:
        return f"A value provided cannot be converted into a number: {text[:40]}"
    if not value.is_finite():
        return f"A value provided cannot be converted into a number: {text[:40]}"
    normal = value.normalize(_NUMBER_CONTEXT)
    if len(normal.as_tuple().digits) > _NUMBER_DIGITS:
        return "Attempting to store more than 38 significant digits in a Number"
    if normal and normal.adjusted() > _NUMBER_EXPONENTS[-1]:
        return "Number overflow. Attempting to store a number with magnitude larger than supported range"
    if normal and normal.adjusted() < _NUMBER_EXPONENTS[0]:
        return "Number underflow. Attempting to store a number with magnitude smaller than supported range"
    return None


def _numbers_in(value: Any) -> Any:
    """Every number text in a request body (``{"N": ...}`` and ``{"NS": [...]}`` attribute values)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "N" and isinstance(inner, str):
                yield inner
            elif key == "NS" and isinstance(inner, list):
                yield from (n for n in inner if isinstance(n, str))
            else:
                yield from _numbers_in(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _numbers_in(inner)


def _numbers_checked(key: str) -> Callable[..., Any]:
    """moto's request handler ``key`` (``DynamoHandler.<action>``), refusing a number DynamoDB refuses."""

    def handle(self: Any, *args: Any, **kwargs: Any) -> Any:
        from moto.dynamodb.exceptions import MockValidationException  # noqa: PLC0415 - only with moto

        for text in _numbers_in(self.body):
            refusal = number_refusal(text)
            if refusal is not None:
                raise MockValidationException(refusal)
        original = _PATCH.originals.get(key) or getattr(type(self), _attribute(key))
        return original(self, *args, **kwargs)

    setattr(handle, _MARK, True)
    return handle


_CHECKED_ACTIONS = tuple(
    f"DynamoHandler.{action}" for action in ("put_item", "update_item", "batch_write_item", "transact_write_items")
)
for _function in (
    _all_items,
    _query,
    _project,
    _execute_result,
    _put_record,
    _get_records,
    _serialised,
    _serialised_mock,
):
    setattr(_function, _MARK, True)


@dataclass
class _Patch:
    """Who uses the speed-ups, and moto's own methods to put back when the last one stops."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    users: int = 0
    originals: dict[str, Callable[..., Any]] = field(default_factory=dict)


_PATCH = _Patch()


def install() -> bool:
    """Use the speed-ups (counted: every :func:`install` needs its :func:`uninstall`). True if in use."""
    with _PATCH.lock:
        targets = _targets()
        if targets is None:
            return False
        if _PATCH.users == 0:
            for key, (cls, replacement) in targets.items():
                current = getattr(cls, _attribute(key))
                if not getattr(current, _MARK, False):
                    _PATCH.originals[key] = current
                    setattr(cls, _attribute(key), replacement)
        _PATCH.users += 1
        return True


def uninstall() -> None:
    with _PATCH.lock:
        if _PATCH.users == 0:
            return
        _PATCH.users -= 1
        targets = _targets()
        if _PATCH.users == 0 and targets is not None:
            for key, (cls, _) in targets.items():
                original = _PATCH.originals.pop(key, None)
                if original is not None:
                    setattr(cls, _attribute(key), original)


def _attribute(key: str) -> str:
    """The method a target's key names: ``Class.method`` or a bare ``method``."""
    return key.rpartition(".")[2]


def _targets() -> dict[str, tuple[type, Callable[..., Any]]] | None:
    """moto's classes and what replaces their methods, when moto is the shape this module knows (5.x)."""
    try:
        import moto  # noqa: PLC0415 - moto is heavy; only local mode needs it
        from moto.core.botocore_stubber import BotocoreStubber  # noqa: PLC0415
        from moto.dynamodb.models.dynamo_type import Item  # noqa: PLC0415
        from moto.dynamodb.models.table import Table  # noqa: PLC0415
        from moto.dynamodb.responses import DynamoHandler, DynamoResult  # noqa: PLC0415
        from moto.kinesis.models import Shard  # noqa: PLC0415
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication  # noqa: PLC0415
    except ImportError:  # pragma: no cover - moto is a dependency of local mode
        return None
    version = str(getattr(moto, "__version__", ""))
    targets: dict[str, tuple[type, Callable[..., Any]]] = {
        "all_items": (Table, _all_items),
        "query": (Table, _query),
        "project": (Item, _project),
        "execute_result": (DynamoResult, _execute_result),
        "put_record": (Shard, _put_record),
        "get_records": (Shard, _get_records),
        "__call__": (DomainDispatcherApplication, _serialised),
        "process_request": (BotocoreStubber, _serialised_mock),
    }
    targets.update({key: (DynamoHandler, _numbers_checked(key)) for key in _CHECKED_ACTIONS})
    shaped = all(callable(getattr(cls, _attribute(key), None)) for key, (cls, _) in targets.items())
    if not version.startswith("5.") or not shaped:
        _log.info("moto %s: order, projection, serialisation and requests left as they are", version or "?")
        return None
    return targets
