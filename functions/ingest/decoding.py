"""From a Kinesis event record to reading candidates, or to rejects saying why not.

A record's data (after KPL de-aggregation) is UTF-8 JSON: one reading (an
object) or several (an array of objects); or one of the agents' formats
(Influx line protocol, Telegraf JSON, OTLP metrics, ``ingest.formats``), whose
parts (a line, a metric, a data point) become candidates or rejects each.
Anything else is rejected, with the part that is wrong, never dropped:

* data that is not base64, a corrupt KPL aggregate, bytes that are not UTF-8
  JSON, or JSON that is neither an object nor an array: one reject for the
  whole (user) record, carrying its bytes as they arrived;
* an array element that is not a valid reading: one reject for that element
  (its index says where it was), while its neighbours go on; likewise an agent
  record's part (its index is the part's position, its reason names it: ``line 3``).

Numbers are decoded exactly. A float literal that would round to zero or to
infinity (``1e-400``, ``1e400``) and an integer longer than Python converts
from text (4,300 digits) arrive as :class:`~decimal.Decimal`, so validation
refuses them by their true value, naming the field, instead of storing 0 or
raising. Ordinary numbers take the C decoder's fast path unchanged.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from adapters.observability import logger
from ingest.formats import INFLUX, OTLP_JSON, Formats, Part, exact_float, exact_int, json_kind, not_enabled, sniff
from ingest.kinesis_records import MalformedRecord, StreamRecord, user_records
from ingest.rejects import Reject

#: What a deployment reads when its settings say nothing else: every agent format, the default entity tags.
DEFAULT_FORMATS = Formats()

#: A user record's first 25 rejected array elements get a message each; the rest are folded.
FOLD_AFTER = 25


@dataclass(slots=True)  # not frozen: made for every reading, and a frozen one costs three times as much
class Candidate:
    """One decoded JSON value that should be a reading, and where it came from.

    ``data`` is the user record's bytes. A value that is the whole record
    (``index`` None) is rejected with them exactly; an array element is
    written back as JSON, or, in the rare case that cannot be done (nesting
    deeper than the encoder's limit), rejected with the whole record's bytes.
    A part of an agent's record (``where`` says which) is rejected with its own
    text (``raw``, a line) or, when it has none, as JSON of what it maps to.
    """

    record: int
    value: object
    sub_sequence_number: int | None
    index: int | None
    data: bytes
    where: str | None = None
    raw: str | None = None

    def payload(self) -> bytes:
        """The bytes a reject carries."""
        if self.raw is not None:
            return self.raw.encode("utf-8", errors="surrogatepass")
        if self.index is None:
            return self.data
        if self.where is not None:
            return encode_json(self.value, fallback=self.data)
        value = self.value
        if _has_non_finite(value):
            # The fast decoder rounds a literal past a double's range (1e400) to infinity; the
            # exact one keeps its digits. Rare (such a reading is always rejected), so done here.
            value = _EXACT_DECODER.decode(self.data.decode(json.detect_encoding(self.data)))[self.index]
        return encode_json(value, fallback=self.data)


@dataclass(slots=True)
class DecodedRecord:
    """A Kinesis record split into candidates and rejects (``units`` counts both)."""

    record: StreamRecord
    kpl_members: int = 0
    candidates: list[Candidate] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    # Made on a record's first rejected array element: most records never need them.
    _elements: dict[int | None, int] | None = None
    _spill: dict[int | None, list[tuple[Candidate, str, str]]] | None = None

    @property
    def units(self) -> int:
        spilled = sum(len(rest) for rest in self._spill.values()) if self._spill else 0
        return len(self.candidates) + len(self.rejects) + spilled

    def reject_of(
        self,
        payload: bytes,
        field_name: str,
        reason: str,
        sub: int | None = None,
        index: int | None = None,
        *,
        readings: int = 1,
        fold: int | None = None,
    ) -> Reject:
        """A reject of (part of) this record, not yet counted among its rejects."""
        record = self.record
        return Reject(
            payload=payload,
            field=field_name,
            reason=reason,
            shard_id=record.shard_id,
            sequence_number=record.sequence_number,
            sub_sequence_number=sub,
            index=index,
            partition_key=record.partition_key,
            stream_arn=record.stream_arn,
            readings=readings,
            fold=fold,
        )

    def reject(
        self, payload: bytes, field_name: str, reason: str, sub: int | None = None, index: int | None = None
    ) -> None:
        self.rejects.append(self.reject_of(payload, field_name, reason, sub, index))

    def reject_candidate(self, candidate: Candidate, field_name: str, reason: str) -> None:
        """Reject a candidate that is not a valid reading: one message each for the first
        ``FOLD_AFTER`` array elements (or parts) of a user record, folded ones past that (see below)."""
        if candidate.where is not None:
            reason = f"{candidate.where}: {reason}"
        if candidate.index is not None:
            sub = candidate.sub_sequence_number
            elements = self._elements = self._elements if self._elements is not None else {}
            seen = elements[sub] = elements.get(sub, 0) + 1
            if seen > FOLD_AFTER:
                spill = self._spill = self._spill if self._spill is not None else {}
                spill.setdefault(sub, []).append((candidate, field_name, reason))
                return
        self.reject(candidate.payload(), field_name, reason, candidate.sub_sequence_number, candidate.index)

    def fold_rejects(self, payload_bytes: int) -> None:
        """Bound the messages one record can cost: the rejected array elements past the first
        ``FOLD_AFTER`` travel as JSON arrays of themselves, at most ``payload_bytes`` each (an
        element over it goes alone), one reject per array.

        Without this, a 1 MB record of 500,000 tiny invalid elements would need 500,000
        messages, run past the deadline and come back forever: content would cost a retry.
        """
        if not self._spill:
            return
        for sub, rest in self._spill.items():
            start, size = 0, 256
            while start < len(rest):
                chunk = rest[start : start + size]
                values = [c.value for c, _, _ in chunk]
                # One encoder call for the chunk, unless an element needs its own way back
                # (a literal rounded to infinity, or nesting too deep to encode together).
                payload = b"" if _has_non_finite(values) else encode_json(values, fallback=b"")
                if not payload:
                    payload = b"[" + b",".join(c.payload() for c, _, _ in chunk) + b"]"
                if len(payload) > payload_bytes and len(chunk) > 1:
                    size = max(1, len(chunk) // 2)
                    continue
                first, field_name, reason = chunk[0]
                span = (
                    f"array elements {first.index}..{chunk[-1][0].index}"
                    if first.where is None
                    else f"parts {first.index}..{chunk[-1][0].index}"
                )
                summary = (
                    f"{len(chunk)} invalid readings ({span}) folded into "
                    f"one message, the payload an array of them; the first: {field_name}: {reason}"
                )
                self.rejects.append(
                    self.reject_of(payload, field_name, summary, sub, readings=len(chunk), fold=first.index)
                )
                start += len(chunk)
                size = max(1, int(len(chunk) * payload_bytes / max(len(payload), 1) * 0.9))
        self._spill.clear()


def decode_record(position: int, record: StreamRecord, formats: Formats = DEFAULT_FORMATS) -> DecodedRecord:
    """Split one Kinesis record (the ``position``-th of its batch) into reading candidates and rejects,
    reading the agents' formats ``formats`` enables beside ingest's JSON."""
    decoded = DecodedRecord(record)
    if record.malformed is not None:
        decoded.reject(record.data, "data", record.malformed)
        return decoded
    plain = _plain_object(record.data)
    kind = json_kind(plain) if plain is not None else None
    if plain is not None and kind is None:
        decoded.candidates.append(Candidate(position, plain, None, None, record.data))
        return decoded
    try:
        members = user_records(record)
    except MalformedRecord as exc:
        decoded.reject(record.data, exc.field, exc.reason)
        return decoded
    if members and members[0].sub_sequence_number is not None:
        decoded.kpl_members = len(members)
    for member in members:
        sub, kept = member.sub_sequence_number, (len(decoded.candidates), len(decoded.rejects))
        try:
            if plain is not None and kind is not None:  # an agent's JSON object, decoded already
                _agent_json(Candidate(position, plain, None, None, record.data), kind, decoded, formats)
            else:
                _decode_member(position, member.data, sub, decoded, formats)
        except Exception as exc:  # a reader's bug: this member is rejected whole, never the batch failed
            logger.exception("a record raised while being decoded; it is rejected, not retried")
            del decoded.candidates[kept[0] :], decoded.rejects[kept[1] :]
            reason = f"could not be read ({type(exc).__name__}); please report this with the payload"
            decoded.reject(member.data, "data", reason, sub)
    return decoded


def _decode_member(position: int, data: bytes, sub: int | None, decoded: DecodedRecord, formats: Formats) -> None:
    """One user record's candidates and rejects, into ``decoded``."""
    sniffed = sniff(data, formats)
    if sniffed.kind == "reject":
        decoded.reject(data, "data", sniffed.reason, sub)
        return
    not_lines = ""
    if sniffed.kind == "influx":
        from ingest.formats import lineprotocol  # noqa: PLC0415 - only line-protocol records need it

        parts = lineprotocol.decode(sniffed.text or "", formats)
        if not parts or any(p.error is None or p.error[0] != "line" for p in parts):
            _add_parts(position, parts, sub, data, decoded)
            return
        # Not one line of it is line protocol: the JSON reader says what it is (a JSON string, or nothing).
        not_lines = f", nor line protocol ({parts[0].where} {parts[0].error[1]})"  # type: ignore[index]
    elif sniffed.text is not None and INFLUX not in formats.enabled:
        not_lines = (
            f", and line protocol is a format this deployment does not read (ingest_formats: {formats.describe()})"
        )
    if sniffed.kind == "otlp_proto":
        from ingest.formats import otlp  # noqa: PLC0415 - only OTLP records need it

        _add_parts(position, otlp.decode(sniffed.otlp, formats), sub, data, decoded)  # type: ignore[arg-type]
        return
    body = sniffed.data
    try:
        value = decode_json(body)
    except UnicodeDecodeError:
        decoded.reject(data, "data", "is not UTF-8 text", sub)
        return
    except json.JSONDecodeError as exc:
        reason = f"is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}){not_lines}"
        decoded.reject(data, "data", reason, sub)
        return
    except RecursionError:
        decoded.reject(data, "data", "is JSON nested too deeply to be a reading", sub)
        return
    except ValueError as exc:  # any other refusal of the decoder: still about these bytes
        decoded.reject(data, "data", f"is not JSON the decoder accepts ({type(exc).__name__})", sub)
        return
    if isinstance(value, dict):
        kind = json_kind(value)
        if kind is None:
            decoded.candidates.append(Candidate(position, value, sub, None, data))
        else:
            _agent_json(Candidate(position, value, sub, None, data), kind, decoded, formats)
    elif isinstance(value, list):
        decoded.candidates.extend(Candidate(position, item, sub, i, data) for i, item in enumerate(value))
    else:
        decoded.reject(
            data,
            "data",
            f"must be a JSON object (one reading) or an array of readings, got {_json_type(value)}",
            sub,
        )


def _agent_json(whole: Candidate, kind: str, decoded: DecodedRecord, formats: Formats) -> None:
    """A JSON object in an agent's format (``kind``), as a candidate for the whole user record: its parts,
    or one reject when the format is not enabled."""
    position, value, sub, data = whole.record, whole.value, whole.sub_sequence_number, whole.data
    assert isinstance(value, dict)  # noqa: S101 - json_kind took it
    if kind not in formats.enabled:
        decoded.reject(data, "data", not_enabled(kind, formats), sub)
    elif kind == OTLP_JSON:
        from ingest.formats import otlp  # noqa: PLC0415 - only OTLP records need it

        _add_parts(position, otlp.decode(value, formats), sub, data, decoded)
    else:
        from ingest.formats import telegraf  # noqa: PLC0415 - only Telegraf JSON records need it

        # One metric is the whole record: its reject carries the record's bytes exactly.
        one = "fields" in value and "name" in value
        _add_parts(position, telegraf.decode(value, formats), sub, data, decoded, whole=one)


def _add_parts(
    position: int, parts: list[Part], sub: int | None, data: bytes, decoded: DecodedRecord, *, whole: bool = False
) -> None:
    """An agent record's parts as candidates (the readings) and rejects (the rest), each where it came from."""
    for index, part in enumerate(parts):
        candidate = Candidate(position, part.value, sub, None if whole else index, data, part.where, part.raw)
        if part.error is None:
            decoded.candidates.append(candidate)
        else:
            decoded.reject_candidate(candidate, *part.error)


def _plain_object(data: bytes) -> dict[str, Any] | None:
    """The JSON object of a record that is one plain JSON object (not KPL, UTF-8, no number the
    C decoder would lose), the shape most producers send; None for anything else.

    The same answer as the general path below, without its objects (UserRecord, encoding
    detection): about half a one-reading record's decoding. Whatever does not fit, or
    raises, is left to the general path, which says why (tests/unit/ingest compare both).
    """
    # '{' then a non-zero byte is UTF-8 to json.detect_encoding; the KPL magic starts 0xF3.
    if data[:1] != b"{" or data[1:2] == b"\x00":
        return None
    try:
        text = data.decode("utf-8")
        if _may_lose_a_number(text):
            return None
        value, end = _SCAN(text, 0)
        if end != len(text) and _WHITESPACE.match(text, end).end() != len(text):  # type: ignore[union-attr]
            return None
    except Exception:  # any refusal: the general path decodes again and says why
        return None
    return value  # type: ignore[no-any-return]


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    return "a number"


_EXACT_DECODER = json.JSONDecoder(parse_float=exact_float, parse_int=exact_int)
# A float literal rounds to 0.0 only below ~2.5e-324. With an exponent of at most two digits
# (|e| <= 99) that takes at least 224 zeros after the point; otherwise the exponent is negative
# with three digits or more. A text showing neither cannot underflow, and takes the C decoder's
# fast path; one that may is decoded exactly (a hook per number, ~1.5x slower).
_MANY_ZEROS = "0" * 200
_LONG_NEGATIVE_EXPONENT = re.compile(r"[0-9][eE]-[0-9]{3}")
# json.loads' own parts: the C scanner with the default hooks, and JSON's whitespace after a value.
_SCAN = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _may_lose_a_number(text: str) -> bool:
    return _MANY_ZEROS in text or (("e-" in text or "E-" in text) and _LONG_NEGATIVE_EXPONENT.search(text) is not None)


def decode_json(data: bytes) -> Any:
    """``json.loads`` that never loses a number's value nor raises for one.

    Raises ``UnicodeDecodeError``, ``json.JSONDecodeError`` or ``RecursionError``
    for data that is not JSON, as ``json.loads`` does.
    """
    text = data.decode(json.detect_encoding(data))
    if _may_lose_a_number(text):
        return _EXACT_DECODER.decode(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer past Python's int-from-text limit; decode again, exactly
        return _EXACT_DECODER.decode(text)


def _has_non_finite(value: object, depth: int = 0) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if depth > 64:  # a reading is shallow; anything deeper is written back as it decoded
        return False
    if isinstance(value, dict):
        return any(_has_non_finite(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_non_finite(v, depth + 1) for v in value)
    return False


def encode_json(value: object, *, fallback: bytes) -> bytes:
    """Compact UTF-8 JSON of a decoded value, for a reject's payload; never raises.

    Numbers kept as Decimal are written as the digits they arrived as, and a
    string holding a lone surrogate (valid JSON, ``"\\udc80"``, but not UTF-8)
    is written with ASCII escapes, so the payload is valid UTF-8 JSON that
    decodes to the same value. ``fallback`` is returned when the value is
    nested too deeply to encode.
    """
    try:
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_no_decimal).encode("utf-8")
        except (UnicodeEncodeError, TypeError):
            pass
        marker = uuid.uuid4().hex
        numbers: list[str] = []

        def hide(found: object) -> str:
            numbers.append(str(found))
            return f"{marker}{len(numbers) - 1}"

        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=hide)
        for position, digits in enumerate(numbers):
            text = text.replace(f'"{marker}{position}"', digits, 1)
        return text.encode("ascii")
    except (RecursionError, ValueError):
        return fallback


def _no_decimal(found: object) -> object:
    raise TypeError(type(found).__name__)
