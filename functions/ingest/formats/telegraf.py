"""Telegraf's ``json`` serializer: one metric an object, or a batch of them.

::

    {"fields": {"usage_idle": 99.5}, "name": "cpu", "tags": {"cpu": "cpu0", "host": "h1"}, "timestamp": 1700000000}
    {"metrics": [{...}, {...}]}            # json_use_batch_format / use_batch_format = true

The timestamp is in ``telegraf_json_timestamp_units`` (Telegraf's
``json_timestamp_units``, seconds by default), cut to the millisecond. The rest maps
as line protocol does (``ingest.formats.lineprotocol``): measures
``<name>_<field>`` from numbers and booleans (1/0), dimensions from the other tags
and from string fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from ingest.formats import NS_PER_MS, Formats, Part, reading, storable
from keydesign.model import shown_name

_FIELDS = "fields, name, tags, timestamp"
_KEYS = frozenset(_FIELDS.split(", "))


def decode(value: Mapping[str, object], formats: Formats) -> list[Part]:
    """The parts of one decoded Telegraf JSON object: one metric, or each metric of a batch."""
    if "fields" in value and "name" in value:
        return [metric(value, "the metric", formats)]
    metrics = value.get("metrics")
    return [metric(m, f"metrics[{k}]", formats) for k, m in enumerate(metrics if isinstance(metrics, list) else [])]


def metric(value: object, where: str, formats: Formats) -> Part:
    """One Telegraf JSON metric as a reading, or what is wrong with it."""
    if not isinstance(value, Mapping):
        return Part(value, where, error=("metric", f"must be a JSON object, got {type(value).__name__}"))
    unknown = value.keys() - _KEYS
    if unknown:
        shown = shown_name(sorted(unknown, key=str)[0])
        return Part(value, where, error=("metric", f"{shown!r} is not a field of a Telegraf metric ({_FIELDS})"))
    name, fields, tags, stamp = value.get("name"), value.get("fields"), value.get("tags", {}), value.get("timestamp")
    if not isinstance(name, str):
        return Part(value, where, error=("name", "must be the metric's name (a string)"))
    if not isinstance(fields, Mapping):
        return Part(value, where, error=("fields", "must be an object of field name to value"))
    if not isinstance(tags, Mapping) or not all(isinstance(t, str) for t in tags.values()):
        return Part(value, where, error=("tags", "must be an object of tag name to string"))
    if isinstance(stamp, bool) or not isinstance(stamp, int | float | Decimal):
        return Part(value, where, error=("timestamp", "is required: a number in telegraf_json_timestamp_units"))
    try:
        unit = formats.telegraf_json_unit_ns
        ts_ms = stamp * unit // NS_PER_MS if type(stamp) is int else int(Decimal(stamp) * unit // NS_PER_MS)
    except ArithmeticError:  # NaN, infinity (a decoded literal past a double's range)
        return Part(value, where, error=("timestamp", f"{stamp} is not a time a reading can have"))
    measures: dict[str, object] = {}
    strings: dict[str, str] = {}
    for key, field in fields.items():
        if isinstance(field, str):
            strings[key] = field
            continue
        if not isinstance(field, int | float | Decimal):  # a bool is an int: True 1, False 0
            reason = f"must be a number, boolean or string, got {field!r:.40}"
            return Part(value, where, error=(f"fields.{shown_name(key)}", reason))
        measure = storable(f"{name}_{key}")
        if measure in measures:
            return Part(value, where, error=(f"measures.{measure}", f"two fields are stored as {measure!r}"))
        measures[measure] = int(field) if isinstance(field, bool) else field
    mapped = reading(tags, measures, ts_ms, formats, strings=strings)
    if isinstance(mapped, tuple):
        return Part(value, where, error=mapped)
    return Part(mapped, where)
