"""IAM conformance of the rotator (tests/integration/iam_conformance.py)."""

from __future__ import annotations

import pytest

from tests.integration.iam_conformance import assert_conforms, recording
from tests.integration.rotator.conftest import World
from tests.integration.rotator.test_boundaries import (
    test_a_drifted_mapping_and_alarm_are_put_back as drift_repaired,
)
from tests.integration.rotator.test_drift import (
    test_the_mapping_and_alarms_of_a_table_dropped_by_hand_are_removed as orphans_removed,
)
from tests.integration.rotator.test_export import (
    test_an_expired_table_is_exported_and_dropped_on_a_later_run as exported_and_dropped,
)

pytestmark = pytest.mark.integration

SERVICE_ONLY = {
    "sqs:SendMessage": "Lambda sends a failed asynchronous invocation to the function's dead-letter queue",
    **{
        action: "DynamoDB writes the export to S3 with the caller's permissions, not the function's code"
        for action in ("s3:AbortMultipartUpload", "s3:PutObject", "s3:PutObjectAcl")
    },
}


def test_every_call_the_rotator_makes_is_granted_to_its_role(world: World) -> None:
    # When, configured with an export bucket, it builds tables, exports and drops an expired one, puts a
    # drifted mapping and alarm back and removes those of a table dropped by hand (three of its own
    # scenarios, run again while recording)
    with recording("rotator") as called:
        exported_and_dropped(world)
        drift_repaired(world)
        orphans_removed(world)
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms("rotator", called, not_called=SERVICE_ONLY, variants=["daily-with-exports"])


def test_without_an_export_bucket_the_rotator_calls_only_what_its_role_grants(world: World) -> None:
    # Given the shipped defaults: no export bucket (so no export permissions either)
    for name in [n for n in world.env if n.startswith("EXPORT_")]:
        del world.env[name]
    # When it runs the same scenarios but the export
    with recording("rotator") as called:
        drift_repaired(world)
        orphans_removed(world)
    assert_conforms("rotator", called, not_called=SERVICE_ONLY, variants=["default"])
