"""The network-bound ingest benchmark's stub DynamoDB: it stores what each writer sends (and counts the
readings in blocks), and waits."""

from __future__ import annotations

import time

import boto3
import pytest

from benchmarks import ingest_network as net
from benchmarks.ingest import lambda_records, readings

pytestmark = pytest.mark.integration


def test_the_network_stub_stores_what_each_writer_sends_and_waits_its_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the stub in its own process, answering after 20 ms, and 60 readings in packed records
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "test")
    records = lambda_records(readings(60, seed=3), packed=True)
    stub = net.StubProcess()
    try:
        stub.get("/latency/20")
        # When the batch_writer peer and our ingest write them
        resource = boto3.resource("dynamodb", endpoint_url=stub.endpoint, region_name=net.REGION)
        started = time.perf_counter()
        net.peer_batch_writer(resource.Table("peer"), records)
        peer_s = time.perf_counter() - started
        outcome = net.ours(net.our_ingestor(stub.endpoint, "ours", records[:1]), records)
        # Then each table holds every reading (ours in blocks, decoded to count them), the peer's three
        # sequential calls took at least 3 x 20 ms, and ours needed fewer calls for its blocks
        assert stub.get("/count/peer") == {"count": 60} and stub.get("/count/ours") == {"count": 60}
        assert peer_s >= 0.06
        assert outcome.blocks < 60 and outcome.write.calls == -(-outcome.blocks // 25) < 3
    finally:
        stub.stop()
