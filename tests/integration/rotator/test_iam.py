"""IAM conformance of the rotator (tests/integration/iam_conformance.py)."""

from __future__ import annotations

import pytest

from tests.integration.iam_conformance import assert_conforms, recording
from tests.integration.rotator.conftest import World
from tests.integration.rotator.test_boundaries import (
    test_a_drifted_mapping_and_alarm_are_put_back as drift_repaired,
)
from tests.integration.rotator.test_boundaries import (
    test_a_table_is_dropped_once_past_retention_and_no_late_reading_can_reach_it as dropped,
)
from tests.integration.rotator.test_drift import (
    test_the_mapping_and_alarms_of_a_table_dropped_by_hand_are_removed as orphans_removed,
)
from tests.integration.rotator.test_export import (
    test_an_expired_table_is_exported_and_dropped_on_a_later_run as exported_and_dropped,
)
from tests.integration.rotator.test_table_class import (
    test_a_closed_table_moves_to_standard_ia_when_its_storage_dominates as moved_to_standard_ia,
)

pytestmark = pytest.mark.integration

SERVICE_ONLY = {
    "sqs:SendMessage": "Lambda sends a failed asynchronous invocation to the function's dead-letter queue",
    "iam:CreateServiceLinkedRole": "DynamoDB creates Contributor Insights' role with the caller's permission",
    **{
        action: "DynamoDB writes the export to S3 with the caller's permissions, not the function's code"
        for action in ("s3:AbortMultipartUpload", "s3:PutObject", "s3:PutObjectAcl")
    },
}


def test_every_call_the_rotator_makes_is_granted_to_its_role(world: World) -> None:
    # When, configured with an export bucket, it builds tables, exports and drops an expired one, puts a
    # drifted mapping and alarm back, removes those of a table dropped by hand and moves a closed table to
    # Standard-IA (four of its own scenarios, run again while recording)
    with recording("rotator") as called:
        exported_and_dropped(world)
        drift_repaired(world)
        orphans_removed(world)
        moved_to_standard_ia(world, 0.0, True)
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms("rotator", called, not_called=SERVICE_ONLY, variants=["daily-with-exports"])


def test_without_an_export_bucket_the_rotator_calls_only_what_its_role_grants(world: World) -> None:
    # Given the shipped defaults: no export bucket (so no export permissions either)
    for name in [n for n in world.env if n.startswith("EXPORT_")]:
        del world.env[name]
    # When it runs the same scenarios, a drop without an export instead of the export
    with recording("rotator") as called:
        drift_repaired(world)
        orphans_removed(world)
        moved_to_standard_ia(world, 0.0, True)
        dropped(world, "3d", "2026-11-29T23:59:59.999Z")
    assert_conforms("rotator", called, not_called=SERVICE_ONLY, variants=["default"])
