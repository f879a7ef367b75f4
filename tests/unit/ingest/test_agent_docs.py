"""docs/ingest.md's "Agents" section is true: each agent's configuration there parses and asks for a format
ingest reads, and each example record, written as that configuration writes it, is stored as the reading the
section shows."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import yaml

from ingest.decoding import DEFAULT_FORMATS
from ingest.formats import AGENT_FORMATS, TELEGRAF_JSON_UNITS
from tests.unit.ingest.agents import compress, otlp_json, otlp_request
from tests.unit.ingest.test_agent_formats import NS, ingest

DOC = (Path(__file__).resolve().parents[3] / "docs" / "ingest.md").read_text(encoding="utf-8")
SECTION = DOC[DOC.index("\n## Agents\n") : DOC.index("\n## Configuration")]


def _blocks(language: str, after: str) -> list[str]:
    """The fenced blocks of ``language`` ("" for a plain fence) in the subsection headed ``after``."""
    start = SECTION.index(f"### {after}\n")
    end = SECTION.find("\n### ", start + 1)
    blocks: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in SECTION[start : end if end > 0 else len(SECTION)].splitlines():
        if line.startswith("```") and current is None:
            current = []
            blocks.append((line[3:].strip(), current))
        elif line.startswith("```"):
            current = None
        elif current is not None:
            current.append(line)
    return ["\n".join(lines) + "\n" for kind, lines in blocks if kind == language]


def _readings(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a block, one after the other."""
    decoder, out, pos = json.JSONDecoder(), [], 0
    while pos < len(text.strip()):
        value, end = decoder.raw_decode(text, pos)
        out.append(value)
        pos = end + (len(text[end:]) - len(text[end:].lstrip()))
    return out


def _shown(stored: list[tuple[str, int, dict[str, object], dict[str, str]]]) -> list[dict[str, object]]:
    return [{"entity_id": e, "measures": m, **({"dimensions": d} if d else {})} for e, _, m, d in stored]


def _without_placeholders(readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("event_id", "timestamp")} for r in readings]


def test_the_telegraf_configuration_asks_for_a_format_ingest_reads_and_its_lines_are_stored_as_shown() -> None:
    (config,) = _blocks("toml", "Telegraf")
    output = tomllib.loads(config)["outputs"]["kinesis"][0]
    assert output["data_format"] == "influx" and output["partition"] == {"method": "tag", "key": "host"}
    assert "influx" in AGENT_FORMATS and "1s" in TELEGRAF_JSON_UNITS  # the commented json alternative's units
    (lines,) = _blocks("", "Telegraf")
    ts_ns = int(lines.splitlines()[0].split()[-1])
    _, stored, rejects = ingest([lines.strip().encode()], now_ms=ts_ns // NS + 1_000)
    assert rejects == []
    shown = _readings(_blocks("json", "Telegraf")[0])
    assert _shown(stored) == _without_placeholders(shown)
    assert [s[1] for s in stored] == [ts_ns // NS, ts_ns // NS + 10]
    assert [r["timestamp"] for r in shown] == ["2026-11-18T11:06:40.123Z", "2026-11-18T11:06:40.133Z"]


def test_the_telegraf_json_example_is_read_with_the_default_units() -> None:
    (metric,) = _readings(_blocks("json", "Telegraf")[1])
    _, stored, rejects = ingest([json.dumps(metric).encode()], now_ms=metric["timestamp"] * 1000 + 1_000)
    assert rejects == []
    assert stored == [
        ("web-01", metric["timestamp"] * 1000, {"cpu_usage_idle": 97.25, "cpu_usage_user": 1.5}, {"cpu": "cpu-total"})
    ]


def test_the_collector_configuration_asks_for_what_ingest_reads_and_the_sdk_example_is_stored_as_shown() -> None:
    (config,) = _blocks("yaml", "OpenTelemetry Collector")
    exporter = yaml.safe_load(config)["exporters"]["awskinesis"]
    encoding, compression = exporter["encoding"]["name"], exporter["encoding"]["compression"]
    assert encoding in DEFAULT_FORMATS.enabled
    (code,) = _blocks("python", "OpenTelemetry Collector")
    resource = {"service.name": "checkout", "service.instance.id": "pod-7", "host.name": "node-1"}
    assert json.dumps(resource) in " ".join(SECTION.split())  # the resource the section names
    # the section's own snippet, run against the SDK's meter
    request = otlp_request(lambda meter: exec(code, {"meter": meter}), resource)  # noqa: S102
    data = request.SerializeToString() if encoding == "otlp_proto" else otlp_json(request)
    t_ms = request.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points[0].time_unix_nano // NS
    _, stored, rejects = ingest([compress(data, compression)], now_ms=t_ms + 1_000)
    assert rejects == []
    shown = _without_placeholders(_readings(_blocks("json", "OpenTelemetry Collector")[0]))
    assert sorted(_shown(stored), key=json.dumps) == sorted(shown, key=json.dumps)
