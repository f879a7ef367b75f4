"""The query client, ``tsctl query`` and ``tsctl rejects`` against one running local system.

One system (ingest and the query API) serves the whole module: starting one
costs seconds. Each test uses its own entities or reject fields, so the tests
do not depend on each other's order.
"""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from client import ApiError, QueryClient
from keydesign import format_ts
from local_runtime import LocalSystem
from producer.publisher import Publisher, kinesis_client
from producer.redrive import FieldRename, MessageQueue, RejectMessage, peek, redrive, summarise
from tests.integration.local_runtime.conftest import (
    REPO_ROOT,
    WAIT_S,
    ingest_only,
    local_config,
    publish_readings,
    readings,
    stored,
)
from tsctl.cli import main

pytestmark = pytest.mark.integration

ENTITY = "sensor-0001"
PUBLISHED = readings(1_000, entities=4, prefix="cl")  # 250 readings of each of 4 entities, 1 ms apart
LOW = min(r["timestamp"] for r in PUBLISHED)
HIGH = max(r["timestamp"] for r in PUBLISHED) + 1


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSystem]:
    # The functions' logs go to a file, as to CloudWatch Logs, not into the commands' captured output.
    log = tmp_path_factory.mktemp("client") / "functions.log"
    with LocalSystem(local_config(), ingest_only(query_api=True, function_log=log)) as running:
        publish_readings(running, PUBLISHED)
        assert running.wait_until_idle(WAIT_S)
        yield running


def expected(entity: str | None = None) -> list[str]:
    chosen = [r for r in PUBLISHED if entity is None or r["entity_id"] == entity]
    return [r["event_id"] for r in sorted(chosen, key=lambda r: (r["timestamp"], r["event_id"]))]


def local_client(system: LocalSystem, **kwargs: Any) -> QueryClient:
    return QueryClient(str(system.endpoints.api_url), **kwargs)


# -- the client ------------------------------------------------------------------------


def test_readings_follow_the_cursor_across_many_pages(system: LocalSystem) -> None:
    # When one entity's 250 readings are read 10 a page
    stream = local_client(system).readings(ENTITY, LOW, HIGH, limit=10)
    got = list(stream)
    # Then every reading comes once, in time order, over 25 pages, typed
    assert [r.event_id for r in got] == expected(ENTITY)
    assert stream.pages == 25 and stream.count == 250
    assert got[0].measures["temp"] == PUBLISHED[1]["measures"]["temp"]
    assert stream.cost.queries >= 25
    # And descending order is the exact reverse
    down = [r.event_id for r in local_client(system).readings(ENTITY, LOW, HIGH, limit=100, order="desc")]
    assert down == expected(ENTITY)[::-1]


def test_range_reads_every_entity_once_and_latest_and_aggregates_answer(system: LocalSystem) -> None:
    client = local_client(system)
    stream = client.range_readings(format_ts(LOW), format_ts(HIGH), limit=300)
    got = list(stream)
    assert sorted(r.event_id for r in got) == sorted(expected())
    # (a fresh local stack prunes block partitions by occupancy from its first reading: a page reads the
    # 4 entities' shards, not all 8 of each bucket the range touches; the write tier's group partitions of
    # an hour not yet compacted are read whatever occupancy says: docs/query.md)
    unpruned = client.explain("range", from_=LOW, to=HIGH)
    kinds = Counter(p["kind"] for p in unpruned.raw["partitions"])
    assert kinds["blocks"] + kinds["group"] == unpruned.partition_count and kinds["blocks"] % 8 == 0
    one_page = client.range_readings(format_ts(LOW), format_ts(HIGH), limit=1000)
    assert len(list(one_page)) == 1000 and one_page.pages == 1
    assert one_page.cost.partitions_queried <= 4 * (kinds["blocks"] // 8) + kinds["group"] < unpruned.partition_count
    latest = client.latest(ENTITY)
    assert latest.reading is not None and latest.reading.event_id == expected(ENTITY)[-1]
    series = client.aggregates(ENTITY, LOW, HIGH, "1d", stats=["count", "max"])
    assert series.readings == 250
    assert sum(i.measures["temp"]["count"] for i in series.intervals) == 250
    assert {row["measure"] for row in series.rows()} == {"temp"}
    plan = client.explain("readings", entity_id=ENTITY, from_=LOW, to=HIGH)
    assert plan.partition_count >= 1 and plan.estimated_read_units >= plan.minimum_read_units


def test_a_refused_request_raises_the_apis_error_and_parameter(system: LocalSystem) -> None:
    client = local_client(system)
    with pytest.raises(ApiError) as refused:
        client.aggregates(ENTITY, LOW, HIGH, "fortnight")
    assert refused.value.status == 400 and refused.value.parameter == "interval"
    assert "interval" in refused.value.error and refused.value.attempts == 1
    with pytest.raises(ApiError) as reversed_range:
        list(client.readings(ENTITY, HIGH, LOW))
    assert reversed_range.value.status == 400 and reversed_range.value.parameter in ("from", "to")


def test_to_dataframe_names_pandas_when_it_is_missing(system: LocalSystem, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    series = local_client(system).aggregates(ENTITY, LOW, HIGH, "1d")
    with pytest.raises(ModuleNotFoundError, match="pip install pandas"):
        series.to_dataframe()
    with pytest.raises(ModuleNotFoundError, match="pip install pandas"):
        local_client(system).readings(ENTITY, LOW, HIGH).to_dataframe()


def test_to_dataframe_when_pandas_is_installed(system: LocalSystem) -> None:
    pytest.importorskip("pandas")
    frame = local_client(system).readings(ENTITY, LOW, HIGH, limit=100).to_dataframe()
    assert len(frame) == 250 and list(frame.columns[:3]) == ["timestamp", "entity_id", "event_id"]
    assert "m.temp" in frame.columns


class FlakyProxy:
    """An HTTP stub in front of the local API: answers the first ``failures`` requests with
    ``status`` and ``Retry-After``, then forwards every request to the API."""

    def __init__(self, target: str, *, failures: int, status: int = 503, retry_after: str = "1") -> None:
        self.target = target.rstrip("/")
        self.failures = failures
        self.seen = 0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                proxy.seen += 1
                if proxy.seen <= proxy.failures:
                    body = json.dumps({"error": "the store is busy; retry in a moment", "parameter": None}).encode()
                    self.send_response(status)
                    self.send_header("Retry-After", retry_after)
                else:
                    with urllib.request.urlopen(proxy.target + self.path.removeprefix("/v1"), timeout=30) as answer:  # noqa: S310
                        body = answer.read()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FlakyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_503_is_retried_after_its_retry_after(system: LocalSystem) -> None:
    slept: list[float] = []
    with FlakyProxy(str(system.endpoints.api_url), failures=2) as proxy:
        # When the API answers 503 twice, then serves the read
        client = QueryClient(proxy.url, sleep=slept.append)
        latest = client.latest(ENTITY)
        # Then the client waited at least Retry-After each time and got the answer
        assert latest.reading is not None and latest.reading.event_id == expected(ENTITY)[-1]
        assert proxy.seen == 3 and client.retries == 2 and all(s >= 1.0 for s in slept) and len(slept) == 2
    with FlakyProxy(str(system.endpoints.api_url), failures=10, status=429) as proxy:
        # And with bounded attempts, the error says how often it tried
        client = QueryClient(proxy.url, max_attempts=3, sleep=slept.append)
        with pytest.raises(ApiError) as gave_up:
            client.latest(ENTITY)
        assert gave_up.value.status == 429 and gave_up.value.attempts == 3 and proxy.seen == 3


def command_output(capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """What a command printed. The query function runs in this process and Powertools prints its
    EMF metrics with ``print`` to whatever ``sys.stdout`` is at the time (the capture, here;
    CloudWatch Logs in Lambda): those lines are not the command's and are dropped."""
    out, err = capsys.readouterr()
    mine = [line for line in out.splitlines(keepends=True) if not line.startswith(('{"_aws"', '{"level"'))]
    return "".join(mine), err


# -- tsctl query -----------------------------------------------------------------------


def test_tsctl_query_readings_in_each_format_with_progress(
    system: LocalSystem, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["query", "readings", "--api-url", str(system.endpoints.api_url), "--entity", ENTITY]
    span = ["--from", format_ts(LOW), "--to", format_ts(HIGH)]
    assert main([*base, *span, "--format", "jsonl", "--page-size", "20"]) == 0
    out, err = command_output(capsys)
    assert [json.loads(line)["event_id"] for line in out.splitlines()] == expected(ENTITY)
    assert "read: 13 pages, 250 readings" in err
    assert main([*base, *span, "--format", "csv", "--max-readings", "5"]) == 0
    lines = command_output(capsys)[0].splitlines()
    assert lines[0] == "timestamp,entity_id,event_id,m.temp" and len(lines) == 6
    assert main([*base, *span, "--no-progress"]) == 0
    out, err = command_output(capsys)
    assert out.splitlines()[0].split() == ["timestamp", "entity_id", "event_id", "m.temp"] and err == ""
    assert main([*base, *span, "--explain", "--format", "jsonl"]) == 0
    assert json.loads(command_output(capsys)[0])["route"] == "entity_readings"


def test_tsctl_query_latest_aggregates_range_and_errors(
    system: LocalSystem, capsys: pytest.CaptureFixture[str]
) -> None:
    api = ["--api-url", str(system.endpoints.api_url)]
    span = ["--from", format_ts(LOW), "--to", format_ts(HIGH)]
    assert main(["query", "latest", *api, "--entity", ENTITY, "--json"]) == 0
    assert json.loads(command_output(capsys)[0])["event_id"] == expected(ENTITY)[-1]
    assert main(["query", "aggregates", *api, "--entity", ENTITY, *span, "--interval", "1d", "--format", "csv"]) == 0
    rows = command_output(capsys)[0].splitlines()
    assert rows[0] == "start,measure,readings,count,min,max,avg,sum" and rows[1].split(",")[2] == "250"
    assert main(["query", "range", *api, *span, "--format", "jsonl", "--no-progress"]) == 0
    assert len(command_output(capsys)[0].splitlines()) == 1_000
    assert main(["query", "range", *api, *span, "--explain"]) == 0
    assert "estimated read units" in command_output(capsys)[0]
    assert main(["query", "readings", *api, "--entity", ENTITY, "--from", "yesterday", "--to", format_ts(HIGH)]) == 2
    assert "(parameter from)" in command_output(capsys)[1]


# -- tsctl rejects -----------------------------------------------------------------------


def publish_bad(system: LocalSystem, tag: str, good: int, bad: int) -> list[dict[str, Any]]:
    """``good`` readings that name their measure in a top-level field (refused: field ``<tag>``),
    and ``bad`` whose measure is text (refused: ``measures.<tag>``)."""
    now = int(time.time() * 1000) - 30_000
    renamed = [
        {
            "entity_id": f"late-{tag}",
            "event_id": f"{tag}-{n}",
            "timestamp": now + n,
            "measures": {"rh": 40},
            tag: 20 + n,
        }
        for n in range(good)
    ]
    broken = [
        {"entity_id": f"late-{tag}", "event_id": f"{tag}-x{n}", "timestamp": now + n, "measures": {tag: "hot"}}
        for n in range(bad)
    ]
    publish_readings(system, renamed + broken, validate=False)
    assert system.wait_until_idle(WAIT_S)
    return renamed


def stored_ids(system: LocalSystem, prefix: str) -> set[str]:
    return {r.event_id for r in stored(system) if r.event_id.startswith(prefix)}


def test_list_and_show_peek_without_consuming(system: LocalSystem, capsys: pytest.CaptureFixture[str]) -> None:
    publish_bad(system, "peek", good=3, bad=2)
    queue = ["--queue-url", system.endpoints.rejects_queue_url, "--endpoint-url", system.endpoints.endpoint_url]
    assert main(["rejects", "list", *queue, "--json"]) == 0
    summary = json.loads(command_output(capsys)[0])
    assert summary["by_field"]["peek"] == 3 and summary["by_field"]["measures.peek"] == 2
    assert summary["oldest"] <= summary["newest"]
    assert main(["rejects", "show", *queue, "--field", "measures.peek", "--limit", "1"]) == 0
    out = command_output(capsys)[0]
    assert out.count("reject ") == 1 and '"measures":{"peek":"hot"}' in out and "field:   measures.peek" in out
    # And nothing was consumed: a second look sees the same messages, at once
    assert main(["rejects", "list", *queue]) == 0
    assert re.search(r"peek\s+3", command_output(capsys)[0])


def test_redrive_with_a_rename_loses_nothing_when_kinesis_refuses_part(system: LocalSystem) -> None:
    renamed = publish_bad(system, "tmp", good=12, bad=2)
    endpoints = system.endpoints
    queue = MessageQueue(system.client("sqs"), endpoints.rejects_queue_url, RejectMessage.parse)
    mine = lambda m: m.field in ("tmp", "measures.tmp")  # noqa: E731
    rename = [FieldRename.parse("tmp=measures.tmp")]
    # Given a dry run: it shows the fixed readings and changes nothing
    dry = redrive(queue, None, select=mine, renames=rename, dry_run=True)
    assert len(dry.sent) == 12 and len(dry.kept) == 2
    assert all("tmp" in r["measures"] and "tmp" not in r for r in dry.readings)
    # When Kinesis refuses 5 of the 12 records, with no retry left
    kinesis = RefusingKinesis(kinesis_client(endpoint_url=endpoints.endpoint_url, region=endpoints.region), refuse=5)
    first = redrive(queue, Publisher(kinesis, endpoints.stream_name, max_attempts=1), select=mine, renames=rename)
    # Then the 7 accepted are deleted, the 5 refused and the 2 still invalid stay in the queue
    assert len(first.sent) == 7 and len(first.kept) == 7
    assert sum("Kinesis did not accept" in why for why in (why for _, why in first.kept)) == 5
    assert sum("still invalid" in why for why in (why for _, why in first.kept)) == 2
    # And a second redrive sends the rest
    second = redrive(
        queue,
        Publisher(kinesis_client(endpoint_url=endpoints.endpoint_url, region=endpoints.region), endpoints.stream_name),
        select=mine,
        renames=rename,
    )
    assert len(second.sent) == 5 and len(second.kept) == 2
    assert system.wait_until_idle(WAIT_S)
    # So every fixable reading is stored once, and the queue keeps exactly the unfixable two
    assert stored_ids(system, "tmp-") == {r["event_id"] for r in renamed}
    left = summarise(m for m in peek(queue, 1000) if mine(m))
    assert left["messages"] == 2 and left["by_field"] == {"measures.tmp": 2}


def test_tsctl_rejects_redrive_dry_run_then_for_real(system: LocalSystem, capsys: pytest.CaptureFixture[str]) -> None:
    renamed = publish_bad(system, "cli", good=4, bad=1)
    endpoints = system.endpoints
    argv = [
        "rejects",
        "redrive",
        "--queue-url",
        endpoints.rejects_queue_url,
        "--endpoint-url",
        endpoints.endpoint_url,
        "--region",
        endpoints.region,
        "--field",
        "cli",
        "--rename-field",
        "cli=measures.temp",
    ]
    assert main([*argv, "--dry-run"]) == 0
    assert "would send: 4; kept in the queue: 0" in command_output(capsys)[0]
    assert main([*argv, "--stream", endpoints.stream_name]) == 0
    assert "sent and deleted: 4" in command_output(capsys)[0]
    assert system.wait_until_idle(WAIT_S)
    assert stored_ids(system, "cli-") == {r["event_id"] for r in renamed}
    assert main([*argv, "--stream", endpoints.stream_name]) == 0
    assert "sent and deleted: 0" in command_output(capsys)[0]
    assert main([*argv, "--rename-field", "nonsense"]) == 2


class RefusingKinesis:
    """The real Kinesis client, except that the first ``refuse`` records of the first
    PutRecords call come back failed (as a shard over its limit answers)."""

    def __init__(self, inner: Any, *, refuse: int) -> None:
        self._inner = inner
        self._refuse = refuse

    def put_records(self, **kwargs: Any) -> Mapping[str, Any]:
        records = kwargs["Records"]
        refused, self._refuse = records[: self._refuse], 0
        answer = dict(self._inner.put_records(**{**kwargs, "Records": records[len(refused) :]}))
        failed = [{"ErrorCode": "ProvisionedThroughputExceededException", "ErrorMessage": "slow down"}] * len(refused)
        answer["Records"] = failed + list(answer["Records"])
        answer["FailedRecordCount"] = len(refused)
        return answer


# -- the docs' examples, run as printed ----------------------------------------------------


def doc_commands(path: str) -> list[str]:
    """The lines of the ```bash blocks under docs/client.md's "Runs as printed" heading."""
    text = (REPO_ROOT / path).read_text(encoding="utf-8")
    section = text.split("<!-- runs-as-printed -->", 1)[1].split("<!-- /runs-as-printed -->", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    return list(blocks)


def test_the_docs_examples_run_as_printed(system: LocalSystem) -> None:
    endpoints = system.endpoints
    publish_bad(system, "doc", good=2, bad=0)
    env = {
        "PATH": "/usr/bin:/bin",
        "API": str(endpoints.api_url),
        "AWS": endpoints.endpoint_url,
        "QUEUE": endpoints.rejects_queue_url,
        "STREAM": endpoints.stream_name,
        "AWS_ACCESS_KEY_ID": "local",
        "AWS_SECRET_ACCESS_KEY": "local",
        "AWS_DEFAULT_REGION": endpoints.region,
    }
    blocks = doc_commands("docs/client.md")
    assert len(blocks) >= 2
    for block in blocks:
        script = "set -euo pipefail\n" + block.replace(".venv/bin/python", sys.executable)
        done = subprocess.run(  # noqa: S603 - our own docs, run on loopback
            ["/bin/bash", "-c", script],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, (block, done.stdout[-2000:], done.stderr[-2000:])
    assert system.wait_until_idle(WAIT_S)
    assert stored_ids(system, "doc-") == {"doc-0", "doc-1"}
    queue = MessageQueue(system.client("sqs"), endpoints.rejects_queue_url, RejectMessage.parse)
    assert not [m for m in peek(queue, 1000) if m.field == "doc"]


def test_stack_name_resolves_the_api_queue_and_stream_from_cloudformation_outputs(
    system: LocalSystem, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stack whose outputs name the running system's API, queue and stream (moto's CloudFormation;
    # the running system points every AWS client of this process at moto)
    endpoints = system.endpoints
    outputs = {
        "ApiUrl": str(endpoints.api_url),
        "RejectsQueueUrl": endpoints.rejects_queue_url,
        "IngestStreamName": endpoints.stream_name,
    }
    template = {
        "Resources": {"Marker": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {name: {"Value": value} for name, value in outputs.items()},
    }
    system.client("cloudformation").create_stack(StackName="ClientTest", TemplateBody=json.dumps(template))
    # When the commands are given the stack's name alone, Then they find everything through its outputs
    assert QueryClient.for_stack("ClientTest", region=endpoints.region).api_url == str(endpoints.api_url)
    assert (
        main(["query", "latest", "--stack-name", "ClientTest", "--region", endpoints.region, "--entity", ENTITY]) == 0
    )
    assert expected(ENTITY)[-1] in command_output(capsys)[0]
    publish_bad(system, "stk", good=1, bad=0)
    stack = ["--stack-name", "ClientTest", "--region", endpoints.region]
    assert main(["rejects", "redrive", *stack, "--field", "stk", "--rename-field", "stk=measures.temp"]) == 0
    assert "sent and deleted: 1" in command_output(capsys)[0]
    assert system.wait_until_idle(WAIT_S)
    assert stored_ids(system, "stk-") == {"stk-0"}
    # And a stack that does not exist is one line, not a traceback
    assert main(["query", "latest", "--stack-name", "NoSuchStack", "--region", endpoints.region, "--entity", "x"]) == 1
    assert "NoSuchStack" in command_output(capsys)[1]
    assert main(["rejects", "list", "--stack-name", "NoSuchStack", "--region", endpoints.region]) == 1
    assert "NoSuchStack" in command_output(capsys)[1]
