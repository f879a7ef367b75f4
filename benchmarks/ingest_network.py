"""Ingest where the network is the cost: DynamoDB answers every call after a fixed latency.

A stub DynamoDB on loopback (a threaded HTTP server, in a process of its own) takes PutItem and BatchWriteItem,
remembers every item it was sent and answers after ``latency`` milliseconds, as DynamoDB
in another building would; its own work is a JSON parse. Real boto3 clients (HTTP,
signing, serialising) talk to it. The same readings go through three writers into tables of their own
(the seed writer once, the other two alternating round by round):

* **seed**: the seed article's writer, a boto3 resource ``put_item`` per reading;
* **peer**: what the AWS serverless samples write, a handler looping over the Kinesis
  records into ``Table.batch_writer()`` (25 items a call, one call at a time);
* **ours**: the real ``Ingestor`` (blocks, BatchWriteItem, ``WRITE_CONCURRENCY`` calls in flight).

Seed and peer put one item per reading (``benchmarks.ingest.one_item_per_reading``);
ours puts blocks. Each table's distinct readings (blocks decoded) are counted afterwards
against the readings sent. The seed writer makes one
call per reading, so it writes a prefix of the readings (its rate does not depend on how
many). Rerun: ``python -m benchmarks ingest-network``.
"""

from __future__ import annotations

import base64
import gc
import json
import logging
import multiprocessing
import os
import statistics
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from typing import Any

import boto3

from adapters.batch_writer import send_prebuilt_json
from adapters.clients import client_config
from adapters.collector import tune_collector
from adapters.observability import metrics
from benchmarks.harness import Result, benchmark, collector_time
from benchmarks.ingest import (
    NullSQS,
    _env,
    _naive_put_item,
    distinct_readings,
    lambda_records,
    one_item_per_reading,
    readings,
)
from ingest.kinesis_records import parse_records
from ingest.logic import BatchOutcome, Ingestor
from ingest.settings import IngestSettings
from keydesign import Layout, Reading, ShardMap

REGION = "eu-west-1"
LATENCIES_MS = (5, 20)


class StubDynamoDB(ThreadingHTTPServer):
    """PutItem and BatchWriteItem on loopback, answered after ``latency_s``; items kept per table.

    ``GET /latency/<ms>`` sets the latency, ``GET /count/<table>`` answers the distinct readings
    stored in ``table`` (a block's once each, decoded then: not on the clock)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _StubHandler)
        self.latency_s = 0.0
        self.items: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self.lock = threading.Lock()

    def store(self, table: str, items: list[dict[str, Any]]) -> None:
        with self.lock:
            self.items.setdefault(table, {}).update(((i["pk"]["S"], i["sk"]["S"]), i) for i in items)


class _StubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's pool expects
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms delayed-ACK stall
    server: StubDynamoDB

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        operation = self.headers.get("X-Amz-Target", "").rpartition(".")[2]
        if operation == "PutItem":
            self.server.store(body["TableName"], [body["Item"]])
            answer: dict[str, Any] = {}
        elif operation == "BatchWriteItem":
            for table, requests in body["RequestItems"].items():
                self.server.store(table, [r["PutRequest"]["Item"] for r in requests])
            answer = {"UnprocessedItems": {}}
        else:
            self.send_error(400, f"the stub does not answer {operation}")
            return
        time.sleep(self.server.latency_s)
        self._answer(answer)

    def do_GET(self) -> None:
        _, what, arg = self.path.split("/", 2)
        if what == "latency":
            self.server.latency_s = int(arg) / 1000
            self._answer({})
        else:
            with self.server.lock:
                stored = list(self.server.items.get(arg, {}).values())
            # A block's payload arrived as the JSON protocol writes a blob: base64 text.
            blocks = [{**i, "b": {"B": base64.b64decode(i["b"]["B"])}} if "b" in i else i for i in stored]
            self._answer({"count": distinct_readings(blocks)})

    def _answer(self, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _serve(port: Connection) -> None:
    server = StubDynamoDB()
    port.send(server.server_address[1])
    server.serve_forever()


class StubProcess:
    """The stub in a process of its own: its work does not take the writers' interpreter lock."""

    def __init__(self) -> None:
        parent, child = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("spawn").Process(target=_serve, args=(child,), daemon=True)
        self._process.start()
        self.endpoint = f"http://127.0.0.1:{parent.recv()}"

    def get(self, path: str) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.endpoint}{path}", timeout=30) as answer:  # noqa: S310 - loopback
            return dict(json.loads(answer.read()))

    def stop(self) -> None:
        self._process.terminate()
        self._process.join(10)


def peer_batch_writer(table: Any, records: list[dict[str, Any]]) -> None:
    """The AWS samples' stream handler: decode each record, put each reading through ``batch_writer``."""
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=table.name)
    shard_map = ShardMap.initial(layout.bucket, 16)
    with table.batch_writer() as batch:
        for record in records:
            payload = json.loads(base64.b64decode(record["kinesis"]["data"]))
            for raw in payload if isinstance(payload, list) else [payload]:
                batch.put_item(Item=one_item_per_reading(layout, shard_map, Reading.parse(raw)))


def our_ingestor(endpoint: str, table: str, warm_up: list[dict[str, Any]]) -> Ingestor:
    """The project's ingest on a boto3 client of the stub, as ``from_settings`` wires it, warm as a
    container that has served a batch: it has ingested ``warm_up`` (records it will be given again)."""
    # The configuration adapters.clients gives ingest's writes (ingest retries unprocessed items itself)
    dynamodb = boto3.client(
        "dynamodb", endpoint_url=endpoint, region_name=REGION, config=client_config(max_attempts=1, validate=False)
    )
    send_prebuilt_json(dynamodb)  # as from_settings does for the client it creates
    ingestor = Ingestor.from_settings(IngestSettings.from_env(_env(table)), dynamodb=dynamodb, sqs=NullSQS())
    ingestor.ingest(parse_records({"Records": warm_up}), 900_000)
    metrics.clear_metrics()
    return ingestor


def ours(ingestor: Ingestor, records: list[dict[str, Any]]) -> BatchOutcome:
    """Ingest ``records`` (parsed as the handler parses its event); what became of them."""
    try:
        outcome = ingestor.ingest(parse_records({"Records": records}), 900_000)
    finally:
        ingestor.close()
        metrics.clear_metrics()
    assert outcome.written == outcome.readings and not outcome.failed_records, "ours must ingest everything"
    return outcome


@benchmark("ingest-network", "readings/s with DynamoDB answering after 5 and 20 ms: seed, batch_writer peer, ours")
def ingest_network(quick: bool) -> Result:
    logging.getLogger("botocore").setLevel(logging.WARNING)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(name, "benchmark")
    count, seed_count, rounds = (1_000, 100, 1) if quick else (5_000, 400, 5)
    items = readings(count, seed=13)
    records = lambda_records(items, packed=True)
    result = Result(
        params={
            "readings": count,
            "seed_readings": seed_count,
            "records": len(records),
            "write_concurrency": 8,
            "rounds": rounds,
        },
        method=(
            "a stub DynamoDB on loopback, in its own process (threaded HTTP server: parses each call, keeps its "
            "items, sleeps the latency, answers); real boto3 clients; per latency the seed writer once (a prefix "
            f"of the readings), then peer and ours alternating {rounds} times, each into a table of its own, "
            "first writing the first 4 records unclocked (a warm container; the same readings again); every "
            "table's distinct readings counted afterwards (blocks decoded); wall time and CPU time (this process, "
            "all threads) of each write phase, median per writer; the ratio is of the medians (each round's ratio "
            "in the note). seed = resource put_item per reading, peer = "
            "Table.batch_writer() over the records as the AWS samples do (one item per reading), ours = the "
            "Ingestor (blocks, its event parsed as the handler parses it) with "
            "WRITE_CONCURRENCY 8 on the client configuration adapters.clients gives it, and the garbage "
            "collector as its handler sets it (tune_collector; the peer runs with Python's defaults); each round "
            "also runs ours with Python's collector (untuned), and times the collector in both"
        ),
    )
    stub = StubProcess()
    try:
        for latency_ms in LATENCIES_MS:
            stub.get(f"/latency/{latency_ms}")
            started = time.perf_counter()
            _naive_put_item(stub.endpoint, items[:seed_count], table=f"seed-{latency_ms}ms", warm_up_table="warm-up")
            seed_rate = seed_count / (time.perf_counter() - started)
            rates: dict[str, list[float]] = {"peer": [], "untuned": [], "ours": []}
            cpu: dict[str, list[float]] = {"peer": [], "ours": []}  # CPU seconds of this process, all threads
            collecting: dict[str, list[float]] = {"untuned": [], "ours": []}
            for round_ in range(rounds):
                table = f"peer-{latency_ms}ms-{round_}"
                peer = boto3.resource("dynamodb", endpoint_url=stub.endpoint, region_name=REGION).Table(table)
                peer_batch_writer(peer, records[:4])  # unclocked, as ours: the same keys again below
                started, cpu_started = time.perf_counter(), time.process_time()
                peer_batch_writer(peer, records)
                rates["peer"].append(count / (time.perf_counter() - started))
                cpu["peer"].append(time.process_time() - cpu_started)
                for writer in ("untuned", "ours"):  # ours with Python's collector, then as the handler tunes it
                    ingestor = our_ingestor(stub.endpoint, f"{writer}-{latency_ms}ms-{round_}", records[:4])
                    thresholds = tune_collector() if writer == "ours" else gc.get_threshold()
                    try:
                        with collector_time() as spent:
                            started, cpu_started = time.perf_counter(), time.process_time()
                            calls = ours(ingestor, records).write.calls
                            rates[writer].append(count / (time.perf_counter() - started))
                            if writer == "ours":
                                cpu["ours"].append(time.process_time() - cpu_started)
                        collecting[writer].append(spent[0])
                    finally:
                        gc.unfreeze()
                        gc.set_threshold(*thresholds)
                stored = {w: stub.get(f"/count/{w}-{latency_ms}ms-{round_}")["count"] for w in rates}
                assert stored == dict.fromkeys(rates, count), stored
            assert stub.get(f"/count/seed-{latency_ms}ms")["count"] == seed_count
            _report(
                result,
                f"{latency_ms} ms",
                count=count,
                seed_rate=seed_rate,
                rates=rates,
                cpu=cpu,
                collecting=collecting,
                calls=calls,
            )
    finally:
        stub.stop()
    return result


def _report(
    result: Result,
    at: str,
    *,
    count: int,
    seed_rate: float,
    rates: dict[str, list[float]],
    cpu: dict[str, list[float]],
    collecting: dict[str, list[float]],
    calls: int,
) -> None:
    """One latency's figures: rates (medians), ratios with each round's, CPU per reading, the collector."""
    peer_rate, untuned_rate, ours_rate = (statistics.median(rates[w]) for w in rates)
    each = ", ".join(f"{o / p:.1f}" for p, o in zip(rates["peer"], rates["ours"], strict=True))
    gc_ms = {w: round(statistics.median(v) * 1000) for w, v in collecting.items()}
    result.add(f"{at}: seed readings/s", round(seed_rate), "readings/s", "PutItem each")
    result.add(f"{at}: peer readings/s", round(peer_rate), "readings/s", "batch_writer, median")
    result.add(f"{at}: ours readings/s", round(ours_rate), "readings/s", f"median; {calls} calls")
    result.add(
        f"{at}: ours with Python's collector",
        round(untuned_rate),
        "readings/s",
        f"median; collecting {gc_ms['untuned']} ms a batch, tuned {gc_ms['ours']} ms",
    )
    result.add(f"{at}: ours / peer", round(ours_rate / peer_rate, 1), "x", f"rounds: {each}")
    for writer, seconds in cpu.items():  # ours' wall time is about its CPU time: bound by CPU, not waiting
        busy = statistics.median(seconds) / count * 1e6
        wall = 1e6 / statistics.median(rates[writer])
        result.add(f"{at}: {writer} CPU per reading", round(busy), "us", f"wall {round(wall)} us a reading")
    result.add(f"{at}: ours / seed", round(ours_rate / seed_rate, 1), "x")
