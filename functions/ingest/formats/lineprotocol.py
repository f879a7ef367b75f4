"""Influx line protocol, as Telegraf's ``influx`` serializer and InfluxDB's clients write it.

One metric a line::

    measurement[,tag=value...] field=value[,field=value...] [timestamp]

Escapes as the protocol has them: ``\\,`` ``\\ `` (and ``\\=`` in keys and tag values)
and ``\\n`` ``\\t`` ``\\r`` ``\\\\``; string field values in double quotes with ``\\"``
and ``\\\\``, and may span lines. Blank lines and ``#`` comments are skipped. Field
values: a float (``1``, ``-1.5e3``), an integer ``1i``, an unsigned ``1u``, a boolean
(``t``, ``true``, ``F``, ``FALSE``...), a string.

A line becomes one reading (``ingest.formats.reading``): the measures are its
numeric and boolean fields (``true`` 1, ``false`` 0), named
``<measurement>_<field>``; its string fields are dimensions, named as the field; the
timestamp is in ``influx_precision`` units (Telegraf: ns), cut to the millisecond.
A line without a timestamp is rejected: the reading's time is the producer's, never
guessed. A line that is not line protocol is one reject naming its line number.
"""

from __future__ import annotations

import re

from ingest.formats import NS_PER_MS, Formats, Part, exact_float, exact_int, reading, storable
from keydesign.model import shown_name

_KEY = r"(?:[^\s,=\\]|\\[^\n])+"
_MEASUREMENT = r"(?:[^\s,\\#]|\\[^\n])(?:[^\s,\\]|\\[^\n])*"
_STRING = r'"(?:[^"\\]|\\.)*"'
_VALUE = rf'(?:{_STRING}|[^\s,"]+)'
_LINE = re.compile(
    rf"({_MEASUREMENT})((?:,{_KEY}={_KEY})*) +({_KEY}={_VALUE}(?:,{_KEY}={_VALUE})*)(?: +(-?[0-9]+))?[ \t\r]*(?:\n|\Z)",
    re.DOTALL,
)
# The same line without escapes or string values (Telegraf's usual line): plain character classes, several
# times faster to match; every line it matches the full pattern matches with the same groups.
_PLAIN_KEY = r'[^\s,=\\"]+'
_PLAIN_LINE = re.compile(
    rf'([^\s,\\"#][^\s,\\"]*)((?:,{_PLAIN_KEY}={_PLAIN_KEY})*) +({_PLAIN_KEY}=[^\s,\\"]+(?:,{_PLAIN_KEY}=[^\s,\\"]+)*)'
    r"(?: +(-?[0-9]+))?[ \t\r]*(?:\n|\Z)"
)
_TAG = re.compile(rf",({_KEY})=({_KEY})")
_FIELD = re.compile(rf"({_KEY})=({_VALUE})", re.DOTALL)
_NUMBER = re.compile(r"[+-]?(?:([0-9]+)([iu])|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\Z")
#: Digits of the longest timestamp read (nanoseconds in the year 2286 have 19); longer is refused unread.
_STAMP_DIGITS = 24
_TRUE = frozenset({"t", "T", "true", "True", "TRUE"})
_FALSE = frozenset({"f", "F", "false", "False", "FALSE"})
_KEY_ESCAPE = re.compile(r"\\([,= \\nrtf\"])")
_KEY_ESCAPES = {",": ",", "=": "=", " ": " ", "\\": "\\", "n": "\n", "r": "\r", "t": "\t", "f": "\f", '"': '"'}
_STRING_ESCAPE = re.compile(r'\\(["\\])')


def decode(text: str, formats: Formats) -> list[Part]:
    """Every line of ``text`` as a part: a reading, or what is wrong with it."""
    parts: list[Part] = []
    unit_ns = formats.influx_unit_ns
    pos, end, line = 0, len(text), 1
    plain, match = _PLAIN_LINE.match, _LINE.match
    while pos < end:
        char = text[pos]
        if char in " \t\r":
            pos += 1
            continue
        if char == "\n":
            pos, line = pos + 1, line + 1
            continue
        if char == "#":
            stop = text.find("\n", pos)
            pos = end if stop < 0 else stop
            continue
        found = plain(text, pos) or match(text, pos)
        if found is None:
            stop = text.find("\n", pos)
            stop = end if stop < 0 else stop
            bad = text[pos:stop]
            parts.append(Part(bad, f"line {line}", bad, ("line", _diagnose(bad))))
            pos = stop
            continue
        whole = found.group(0)
        parts.append(_part(found, whole, f"line {line}", unit_ns, formats))
        line += whole.count("\n")
        pos = found.end()
    return parts


def _part(found: re.Match[str], whole: str, where: str, unit_ns: int, formats: Formats) -> Part:
    raw = whole.rstrip("\r\n")
    measurement_text, tag_text, field_text, stamp = found.groups()
    if "\\" in whole:
        measurement = _unescape(measurement_text)
        tags = {_unescape(k): _unescape(v) for k, v in _TAG.findall(tag_text)}
    else:  # nothing escaped (Telegraf's usual line): the texts are the names
        measurement, tags = measurement_text, dict(_TAG.findall(tag_text))
    measures: dict[str, object] = {}
    strings: dict[str, str] = {}
    for key_text, value_text in _FIELD.findall(field_text):
        key = _unescape(key_text)
        value = _value(value_text)
        if value is None:  # a syntax error, as InfluxDB's parser has it: the line is not line protocol
            reason = f"is not line protocol: field {shown_name(key)!r} has the value {value_text[:40]!r}, "
            return Part(whole, where, raw, ("line", reason + "which is not a number, boolean or quoted string"))
        if isinstance(value, str):
            strings[key] = value
            continue
        name = storable(f"{measurement}_{key}")
        if name in measures:
            return Part(whole, where, raw, (f"measures.{name}", f"two fields of the line are stored as {name!r}"))
        measures[name] = value
    if stamp is None:
        return Part(whole, where, raw, ("timestamp", "the line has no timestamp; ingest does not guess one"))
    if len(stamp) > _STAMP_DIGITS:
        return Part(whole, where, raw, ("timestamp", f"{stamp[:40]} is not a time a reading can have"))
    mapped = reading(tags, measures, int(stamp) * unit_ns // NS_PER_MS, formats, strings=strings)
    if isinstance(mapped, tuple):
        return Part(whole, where, raw, mapped)
    return Part(mapped, where, raw)


def _value(text: str) -> object:
    first = text[0]
    if first == '"':
        inner = text[1:-1]
        return _STRING_ESCAPE.sub(r"\1", inner) if "\\" in inner else inner
    if text in _TRUE:
        return 1
    if text in _FALSE:
        return 0
    number = _NUMBER.match(text)
    if number is None:
        return None
    if number.group(2) is None:
        return exact_float(text)
    return exact_int(text[:-1].lstrip("+")) if not (number.group(2) == "u" and first == "-") else None


def _unescape(text: str) -> str:
    if "\\" not in text:
        return text
    return _KEY_ESCAPE.sub(lambda m: _KEY_ESCAPES[m.group(1)], text)


def _diagnose(line: str) -> str:
    """Why a line is not line protocol, as near as a second look can say."""
    expected = "expected measurement[,tag=value...] field=value[,field=value...] [timestamp]"
    if line.count('"') % 2 or line.endswith('\\"'):
        return f"is not line protocol: a string field value is not closed ({expected})"
    head, _, rest = line.partition(" ")
    if not rest.strip():
        return f"is not line protocol: it has no field set ({expected})"
    if head.startswith(","):
        return f"is not line protocol: it has no measurement name ({expected})"
    if "," in head and not all("=" in tag for tag in head.split(",")[1:]):
        return f"is not line protocol: a tag is not key=value ({expected})"
    fields_text = rest.lstrip(" ").split(" ", 1)
    if "=" not in fields_text[0]:
        return f"is not line protocol: a field is not key=value ({expected})"
    if len(fields_text) > 1 and not re.fullmatch(r" *-?[0-9]+ *", fields_text[1]):
        return f"is not line protocol: the timestamp {fields_text[1].strip()[:40]!r} is not an integer ({expected})"
    return f"is not line protocol ({expected})"
