"""IAM conformance of the query function (tests/integration/iam_conformance.py)."""

from __future__ import annotations

import pytest

from adapters.batch_writer import serialize_item
from keydesign import format_ts
from keydesign.rollup import STATE_PK
from tests.integration.iam_conformance import assert_conforms, recording
from tests.integration.mocked_aws import create_readings_table
from tests.integration.query.conftest import HOUR, NOW, PREFIX, Store
from tests.integration.query.test_handler import ENV, load_handler, secret_arn, store
from tests.unit.query.apigw import ApiClient, entity_path

pytestmark = pytest.mark.integration
__all__ = ["secret_arn", "store"]  # fixtures


def test_every_call_the_query_function_makes_is_granted_to_its_role(
    store: Store, secret_arn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the function as deployed: the shard map and occupancy records in the control table
    create_readings_table(store.dynamodb, "control")  # the same string pk and sk
    # and the rollup function has rolled up everything before NOW (an hour boundary), its totals (and
    # compaction's figures) agreeing before NOW - 2 h
    state = {"pk": STATE_PK, "sk": PREFIX, "through": NOW, "late": 0, "totals_through": NOW - 2 * HOUR}
    store.dynamodb.put_item(TableName="control", Item=serialize_item(state))
    # and compaction has compacted up to NOW - 2 h (the write tier is on, as cdk.json deploys it)
    store.dynamodb.put_item(
        TableName="control",
        Item={"pk": {"S": "compactstate"}, "sk": {"S": PREFIX}, "through": {"N": str(NOW - 2 * HOUR)}},
    )
    deployed = {
        "CURSOR_SECRET_ARN": secret_arn,
        "CONTROL_TABLE": "control",
        "ROLLUPS": "1m,1h,1d",
        "WRITE_TIER_GROUPS": "4",
    }
    for name, value in {**ENV, **deployed}.items():
        monkeypatch.setenv(name, value)
    window = {"from_": format_ts(NOW - 4 * HOUR), "to": format_ts(NOW)}
    # When it starts cold and serves every route, following a cursor
    with recording("query") as called:
        api = ApiClient(load_handler().handler)
        first = api.get(entity_path("sensor-1", "readings"), **window, limit=5)
        pages = [
            first,
            api.get(entity_path("sensor-1", "readings"), **window, limit=5, cursor=first.body["next_cursor"]),
        ]
        pages += [
            api.get(entity_path("sensor-1", "latest")),
            api.get(entity_path("sensor-1", "aggregates"), **window, interval="1h", stats="avg"),
            api.get(entity_path("sensor-1", "aggregates"), **window, interval="1m", stats="avg"),
            api.get("/aggregates", **window, interval="1h"),
            api.get("/readings", **window, limit=5),
        ]
    assert [page.body.get("source") for page in pages[3:5]] == ["rollups+raw", "rollups+raw"]
    assert [page.status for page in pages] == [200] * 7, [page.body for page in pages if page.status != 200]
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms(
        "query",
        called,
        not_called={},
    )
