"""The producer end to end on moto: ``tsctl publish`` into Kinesis, then the ingest handler
reads what the stream holds, shaped exactly as Lambda would deliver it."""

from __future__ import annotations

import base64
import json
import random
import sys
import uuid
import zlib
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest

from doubles.clocks import ManualClock
from infra.config import IotTopicRule
from local_runtime.faults import FaultInjectingKinesis, FaultPlan
from producer.formats import AgentPacker
from producer.packing import Packer
from producer.publisher import Publisher, kinesis_client, publish
from producer.synthetic import Workload, generate
from tests.integration.ingest.conftest import Aws, now_ms
from tests.integration.ingest.helpers import invoke
from tests.unit.ingest.kinesis_events import REGION
from tsctl.cli import main

pytestmark = pytest.mark.integration

STREAM = "readings"


@pytest.fixture
def stream(aws: Aws) -> Any:
    kinesis = boto3.client("kinesis", region_name=REGION)
    kinesis.create_stream(StreamName=STREAM, ShardCount=2)
    return kinesis


def _events(kinesis: Any) -> list[dict[str, Any]]:
    """One Lambda event per shard with everything the stream holds, as the event source mapping builds it."""
    description = kinesis.describe_stream(StreamName=STREAM)["StreamDescription"]
    arn = description["StreamARN"]
    events = []
    for shard in description["Shards"]:
        iterator = kinesis.get_shard_iterator(
            StreamName=STREAM, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        records: list[dict[str, Any]] = []
        while iterator:
            page = kinesis.get_records(ShardIterator=iterator, Limit=10_000)
            for r in page["Records"]:
                records.append(
                    {
                        "kinesis": {
                            "kinesisSchemaVersion": "1.0",
                            "partitionKey": r["PartitionKey"],
                            "sequenceNumber": r["SequenceNumber"],
                            "data": base64.b64encode(r["Data"]).decode("ascii"),
                            "approximateArrivalTimestamp": r["ApproximateArrivalTimestamp"].timestamp(),
                        },
                        "eventSource": "aws:kinesis",
                        "eventVersion": "1.0",
                        "eventID": f"{shard['ShardId']}:{r['SequenceNumber']}",
                        "eventName": "aws:kinesis:record",
                        "invokeIdentityArn": "arn:aws:iam::123456789012:role/ingest",
                        "awsRegion": REGION,
                        "eventSourceARN": arn,
                    }
                )
            iterator = page.get("NextShardIterator") if page["Records"] else None
        if records:
            events.append({"Records": records})
    return events


def _readings_in_stream(kinesis: Any) -> list[dict[str, Any]]:
    return [
        reading
        for event in _events(kinesis)
        for record in event["Records"]
        for reading in json.loads(base64.b64decode(record["kinesis"]["data"]))
    ]


def test_publish_a_synthetic_workload_then_ingest_it_all(
    aws: Aws, stream: Any, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a skewed workload with the seed's hot sensor, published with the CLI
    start = now_ms() - 120_000
    code = main(
        [
            "publish",
            "--stream", STREAM, "--region", REGION,
            "--entities", "200", "--rate", "1500", "--zipf", "1.1",
            "--hot", "sensor-alpha-001=2000", "--duration", "2s",
            "--start", str(start), "--no-pace", "--no-progress", "--json",
        ]
    )  # fmt: skip
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["readings_sent"] == 7_000 and summary["readings_failed"] == 0
    assert summary["readings_per_record"] > 10

    # When Lambda delivers each shard's records to the ingest function
    for event in _events(stream):
        result = invoke(handler_module, event, capsys)
        assert result.failed == []

    # Then every reading is stored exactly once, and the hot sensor's 4,000 read back through the plans
    assert len(aws.readings()) == 7_000
    hot = aws.query_entity("sensor-alpha-001", start, start + 3_000)
    assert len(hot) == 4_000


def test_partial_put_records_failures_are_retried_and_nothing_is_duplicated(aws: Aws, stream: Any) -> None:
    clock = ManualClock(0.0)
    faulty = FaultInjectingKinesis(
        kinesis_client(region=REGION), FaultPlan(partial_first=3, partial_fraction=0.4, seed=9)
    )
    publisher = Publisher(faulty, STREAM, clock=clock, sleep=clock.sleep, rng=random.Random(1))
    workload = Workload(entities=30, rate=2_500, duration_s=1, start_ms=now_ms() - 60_000)
    summary = publish(generate(workload), publisher, Packer(max_record_bytes=2_048), clock=clock)
    assert faulty.counters.held_back > 0
    assert summary.records_retried == faulty.counters.held_back
    assert summary.readings_sent == 2_500
    ids = [r["event_id"] for r in _readings_in_stream(stream)]
    assert sorted(ids) == sorted(f"w0-{n}" for n in range(2_500))


def test_publish_files_jsonl_and_csv(aws: Aws, stream: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ts = now_ms() - 10_000
    jsonl = tmp_path / "readings.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({"entity_id": f"s-{i}", "timestamp": ts + i, "measures": {"t": i}}) for i in range(5))
        + "\n{broken\n"
    )
    csv_file = tmp_path / "readings.csv"
    csv_file.write_text(
        "entity_id,timestamp,event_id,measures.t\n" + "".join(f"c-{i},{ts},c{i},{i}\n" for i in range(3))
    )

    assert main(["publish", "--stream", STREAM, "--region", REGION, "--input", str(jsonl), "--no-progress"]) == 1
    out = capsys.readouterr()
    assert "readings invalid" in out.out and "line 6: not JSON" in out.err
    assert main(["publish", "--stream", STREAM, "--region", REGION, "--input", str(csv_file), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["readings_sent"] == 3
    entities = sorted(r["entity_id"] for r in _readings_in_stream(stream))
    assert entities == ["c-0", "c-1", "c-2", "s-0", "s-1", "s-2", "s-3", "s-4"]


def _records_in_stream(kinesis: Any) -> list[tuple[str, bytes]]:
    return [
        (record["kinesis"]["partitionKey"], base64.b64decode(record["kinesis"]["data"]))
        for event in _events(kinesis)
        for record in event["Records"]
    ]


AGENT_CASES = [
    (["--record-format", "influx", "--measurement", "env"], "influx"),
    (["--record-format", "telegraf_json", "--measurement", "env", "--timestamp-units", "1ms"], "telegraf_json"),
    (["--record-format", "otlp_json"], "otlp_json"),
    (["--record-format", "otlp_proto", "--compression", "gzip"], "otlp_proto"),
    (["--record-format", "iot", "--iot-topic-rule", '{"topic_filter": "fleet/+/up", "entity_level": 2}'], "iot"),
]


@pytest.mark.usefixtures("aws")
@pytest.mark.parametrize(("argv", "fmt"), AGENT_CASES, ids=[fmt for _, fmt in AGENT_CASES])
def test_publish_writes_each_reading_as_the_agent_would_one_record_each_with_its_partition_key(
    stream: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], fmt: str
) -> None:
    ts = now_ms() - 10_000
    sent = [
        {"entity_id": f"s-{i}", "timestamp": ts + i, "measures": {"t": i, "rh": 40.5}, "dimensions": {"site": "p 7"}}
        for i in range(4)
    ]
    jsonl = tmp_path / "readings.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in sent))
    code = main(["publish", "--stream", STREAM, "--region", REGION, "--input", str(jsonl), "--json", *argv])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["records_sent"] == 4
    records = sorted(_records_in_stream(stream), key=lambda r: r[1])
    writer = AgentPacker(
        fmt,
        measurement="env",
        telegraf_json_unit="1ms",
        compression="gzip" if fmt == "otlp_proto" else "none",
        iot_rule=IotTopicRule("fleet/+/up", 2),
    )
    expected = [writer.add(reading)[0] for reading in sent]
    if fmt.startswith("otlp"):  # the Collector's key is a random UUID, and gzip's bytes are its inflated request's
        assert all(uuid.UUID(key).version == 4 for key, _ in records)

        def inflate(data: bytes) -> bytes:  # gzip flushed, never closed, as the exporter writes it
            return zlib.decompressobj(31).decompress(data) if fmt == "otlp_proto" else data

        assert sorted(inflate(data) for _, data in records) == sorted(inflate(r.data) for r in expected)
    else:
        assert records == sorted(((r.partition_key, r.data) for r in expected), key=lambda r: r[1])
        assert {key for key, _ in records} == {f"s-{i}" for i in range(4)}


INGESTED_CASES = [
    (["--record-format", "influx"], "influx", ("entity_id", "no tag names the entity")),
    (["--record-format", "telegraf_json"], "telegraf_json", ("entity_id", "no tag names the entity")),
    (["--record-format", "otlp_json", "--compression", "zlib"], "otlp_json", ("entity_id", "no attribute")),
    (["--record-format", "otlp_proto", "--compression", "flate"], "otlp_proto", ("entity_id", "no attribute")),
    (["--record-format", "iot"], "iot", ("timestamp", "is required")),
]


@pytest.mark.parametrize(("argv", "fmt", "refusal"), INGESTED_CASES, ids=[c[1] for c in INGESTED_CASES])
def test_each_agent_format_published_is_stored_as_documented_and_its_bad_readings_rejected_with_reasons(
    aws: Aws,
    stream: Any,
    handler_module: ModuleType,
    *,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    fmt: str,
    refusal: tuple[str, str],
) -> None:
    # Given good readings (whole seconds: Telegraf's JSON carries seconds) and one the agent's format cannot
    # give an entity (or, from IoT Core, a device's message without a timestamp), published with the CLI
    ts = (now_ms() - 60_000) // 1000 * 1000
    good = [
        {"entity_id": f"{fmt}-{i}", "timestamp": ts + 1000 * i, "measures": {"t": i, "rh": 40.5}}
        | ({"dimensions": {"site": "p 7", "line": "a,b=c"}} if i % 2 else {})
        for i in range(4)
    ]
    bad = {"timestamp": ts, "measures": {"t": 1}} if fmt != "iot" else {"entity_id": "iot-x", "measures": {"t": 1}}
    jsonl = tmp_path / "readings.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in [*good, bad]))
    code = main(["publish", "--stream", STREAM, "--region", REGION, "--input", str(jsonl), "--no-validate", *argv])
    assert code == 0
    # When Lambda delivers the stream's records to the ingest function
    for event in _events(stream):
        assert invoke(handler_module, event, capsys).failed == []
    # Then each good reading is stored as the format's mapping says, and the bad one is a reject naming the field
    writer = AgentPacker(fmt, iot_rule=IotTopicRule("sensors/+/readings", 2))
    expected = sorted(
        (json.dumps([r["entity_id"], r["timestamp"], r["measures"], r["dimensions"]], sort_keys=True))
        for g in good
        for r in writer.stored(g)
    )
    got = sorted(
        json.dumps([r.entity_id, r.ts_ms, dict(r.measures), dict(r.dimensions)], sort_keys=True) for r in aws.readings()
    )
    assert got == expected
    assert len(got) == (8 if fmt.startswith("otlp") else 4)
    (reject,) = aws.rejects()
    assert reject["field"] == refusal[0]
    assert refusal[1] in reject["reason"]


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--hot", "sensor-alpha-001"], "ENTITY=RATE"),
        (["--hot", "bad#id=10"], "must not contain '#'"),
        (["--rate", "fast"], "not a number"),
        (["--duration", "soon"], "not a duration"),
        (["--start", "yesterday"], "argument --start"),
        (["--input", "x.jsonl", "--rate", "5"], "--rate: is a synthetic-workload option"),
        (["--input", "/nonexistent/readings.jsonl"], "cannot open"),
        (["--max-record-bytes", "10"], "max_record_bytes"),
        (["--record-format", "otlp_json", "--partition-key", "entity"], "--partition-key: the otlp_json agent's"),
        (["--record-format", "influx", "--partition-key", "group"], "is entity or random"),
        (["--record-format", "influx", "--compression", "gzip"], "--compression: only the OpenTelemetry Collector"),
        (["--record-format", "telegraf_json", "--measurement", "#m"], "--measurement: measurement '#m'"),
        (["--record-format", "iot", "--iot-topic-rule", "null"], "--iot-topic-rule: the iot format needs"),
        (["--iot-topic-rule", '{"topic_filter": "a/b", "entity_level": 2}'], "not '+'"),
        (["--record-format", "xml"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line_naming_the_option(
    aws: Aws, stream: Any, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    try:
        code = main(["publish", "--stream", STREAM, "--region", REGION, "--no-progress", *argv])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    assert code == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert "Traceback" not in err


@pytest.mark.usefixtures("aws", "stream")
def test_without_opentelemetry_proto_otlp_proto_exits_2_naming_the_package(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", None)
    argv = ["publish", "--stream", STREAM, "--region", REGION, "--no-progress", "--record-format", "otlp_proto"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--record-format: otlp_proto needs the opentelemetry-proto package" in err
    assert "pip install opentelemetry-proto" in err and "Traceback" not in err
