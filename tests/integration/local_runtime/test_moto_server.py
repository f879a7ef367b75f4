"""The embedded moto server: a child process on loopback that never outlives what started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from typing import Any

import boto3
import pytest

from local_runtime.moto_server import EmbeddedMoto
from tests.integration.mocked_aws import create_readings_table

pytestmark = pytest.mark.integration


def client(service: str, url: str) -> Any:
    return boto3.client(
        service, endpoint_url=url, region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_the_server_serves_on_loopback_and_its_process_ends_on_stop() -> None:
    # Given a started server
    moto = EmbeddedMoto()
    url = moto.start()
    process = moto._process
    assert process is not None and url.startswith("http://127.0.0.1:")
    try:
        # Then it answers AWS calls: a projected Query returns the items in key order
        dynamodb = client("dynamodb", url)
        create_readings_table(dynamodb, "t")
        for sk in ["b", "c", "a"]:
            dynamodb.put_item(TableName="t", Item={"pk": {"S": "p"}, "sk": {"S": sk}, "v": {"N": "1"}})
        page = dynamodb.query(
            TableName="t",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "p"}},
            ProjectionExpression="sk",
        )
        assert page["Items"] == [{"sk": {"S": "a"}}, {"sk": {"S": "b"}}, {"sk": {"S": "c"}}]
    finally:
        # When it stops
        moto.stop()
    # Then its process has ended and the URL no longer answers
    assert process.poll() is not None
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)  # noqa: S310 - loopback
    with pytest.raises(RuntimeError, match="not running"):
        _ = moto.endpoint_url


def test_a_fresh_start_holds_nothing_from_the_last_one() -> None:
    with EmbeddedMoto() as first:
        client("sqs", first.endpoint_url).create_queue(QueueName="left-behind")
    with EmbeddedMoto() as second:
        assert client("sqs", second.endpoint_url).list_queues().get("QueueUrls", []) == []


def test_the_server_ends_when_the_process_that_started_it_is_killed() -> None:
    # Given a process that starts a server and prints the server's pid
    script = textwrap.dedent(
        """
        import sys, time
        from local_runtime.moto_server import EmbeddedMoto
        moto = EmbeddedMoto()
        moto.start()
        print(moto._process.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)  # noqa: S603
    assert parent.stdout is not None
    try:
        child = int(parent.stdout.readline())
        assert alive(child)
    finally:
        # When that process is killed outright (no chance to stop the server)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        parent.stdout.close()
    # Then the server ends by itself
    assert wait_gone(child), f"moto's process {child} outlived its parent"


def test_a_port_already_taken_is_refused_naming_it() -> None:
    with EmbeddedMoto() as running:
        port = int(running.endpoint_url.rsplit(":", 1)[1])
        with pytest.raises(OSError, match=f"port {port} .* not free"):
            EmbeddedMoto(port).start()
