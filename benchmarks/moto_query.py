"""One Query on moto as local mode reads it, with and without ``local_runtime.moto_speedups``.

A table of the hybrid layout (16 shards, one hourly bucket: 16 partitions, each
many entities' blocks of five readings, ``Layout.pack``) is filled through moto
in this process (``mock_aws``); then the same Queries (one entity's half hour of
blocks: a string ``BETWEEN`` from ``Layout.block_sk_from`` to ``block_sk_through``
on its partition, strongly consistent, what the rollup function and the query
function issue) are timed with moto's own methods and with the speed-ups
installed, alternately, twice each; the best of each is kept.
Rerun: ``python -m benchmarks moto-query``.
"""

from __future__ import annotations

import random
import time
from typing import Any

from benchmarks.harness import Result, benchmark
from benchmarks.ingest import create_readings_table
from keydesign import Layout, Reading, ShardMap, parse_timestamp

REGION = "eu-west-1"
LAYOUT = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
SHARD_MAP = ShardMap.initial(LAYOUT.bucket, 16)
HOUR_START = parse_timestamp("2026-11-24T07:00:00Z")
ENTITIES = 2_000


def _fill(client: Any, items: int, rng: random.Random) -> None:
    create_readings_table(client, LAYOUT.table_prefix)
    puts = []
    for n in range(items):
        entity = f"sensor-{rng.randrange(ENTITIES):05d}"
        first = HOUR_START + (n % 60) * 60_000 + rng.randrange(50_000)
        readings = [Reading(entity, f"{n}-{k}", first + 2_000 * k, {"t": 1.5}) for k in range(5)]
        (block,) = LAYOUT.pack([(r, n) for r in readings], SHARD_MAP)
        key = block.key
        item = {"pk": {"S": key.pk}, "sk": {"S": key.sk}, "b": {"B": block.encoded.payload}}
        puts.append({"PutRequest": {"Item": item}})
    for start in range(0, len(puts), 25):
        client.batch_write_item(RequestItems={LAYOUT.table_prefix: puts[start : start + 25]})


def _ms_per_query(client: Any, queries: int, rng: random.Random) -> tuple[float, list[int]]:
    returned: list[int] = []
    started = time.perf_counter()
    for _ in range(queries):
        entity = f"sensor-{rng.randrange(ENTITIES):05d}"
        (pk,) = LAYOUT.partitions_of(entity, HOUR_START, SHARD_MAP)
        page = client.query(
            TableName=LAYOUT.table_prefix,
            KeyConditionExpression="pk = :p AND sk BETWEEN :low AND :high",
            ExpressionAttributeValues={
                ":p": {"S": pk},
                ":low": {"S": LAYOUT.block_sk_from(entity, HOUR_START)},
                ":high": {"S": LAYOUT.block_sk_through(entity, HOUR_START + 30 * 60_000)},
            },
            ConsistentRead=True,
        )
        returned.append(len(page["Items"]))
    return 1000 * (time.perf_counter() - started) / queries, returned


@benchmark("moto-query", "one entity's Query on moto (25,600 blocks in a table): moto's own vs local mode's speed-ups")
def moto_query(quick: bool) -> Result:
    import boto3  # noqa: PLC0415 - only the local-mode benchmarks need moto
    from moto import mock_aws  # noqa: PLC0415
    from moto.dynamodb.models.table import Table  # noqa: PLC0415

    from local_runtime import moto_speedups  # noqa: PLC0415

    items = 6_400 if quick else 25_600
    # moto's own takes seconds a Query at this size: fewer of them (the same first ones).
    queries = {"own": 3 if quick else 10, "no partition": 10 if quick else 40, "speed-ups": 40 if quick else 150}
    best = dict.fromkeys(queries, float("inf"))
    answers: dict[str, list[int]] = {}
    with mock_aws():
        fake = {"aws_access_key_id": "benchmark", "aws_secret_access_key": "benchmark"}  # mock_aws checks nothing
        client = boto3.client("dynamodb", region_name=REGION, **fake)
        _fill(client, items, random.Random(5))
        for mode in (*queries, *queries):
            if mode != "own" and not moto_speedups.install():
                raise RuntimeError("moto is not the version the speed-ups know")
            try:
                if mode == "no partition":  # the speed-ups as they were before the partition one: moto's query
                    Table.query = moto_speedups._PATCH.originals["query"]  # type: ignore[method-assign]
                ms, returned = _ms_per_query(client, queries[mode], random.Random(9))  # the same Queries each time
            finally:
                if mode != "own":
                    moto_speedups.uninstall()
            best[mode] = min(best[mode], ms)
            answers[mode] = returned
    own = answers["own"]
    if any(found[: len(own)] != own for found in answers.values()) or sum(own) == 0:
        raise RuntimeError(f"the speed-ups changed the answers: {answers}")
    result = Result(params={"items": items, "queries": queries, "partitions": 16})
    result.method = (
        "moto in this process (mock_aws), a 16-partition table of many entities' blocks; the same one-entity "
        "BETWEEN Queries timed with moto's own methods, with the speed-ups but moto's own query (as before the "
        "partition speed-up), and with every speed-up, alternately, best of two each"
    )
    result.add("moto's own: one Query", round(best["own"], 2), "ms")
    result.add("speed-ups without the partition one: one Query", round(best["no partition"], 2), "ms")
    result.add("every speed-up: one Query", round(best["speed-ups"], 2), "ms")
    result.add("without the partition speed-up / with it", round(best["no partition"] / best["speed-ups"], 1), "x")
    return result
