"""IAM conformance of the hot-key function (tests/integration/iam_conformance.py)."""

from __future__ import annotations

import pytest

from tests.integration.hotkeys.conftest import Aws
from tests.integration.hotkeys.test_windows import fast
from tests.integration.hotkeys.test_windows import (
    test_a_message_that_could_not_be_sent_is_sent_by_a_later_window as alert_retried,
)
from tests.integration.hotkeys.test_windows import (
    test_load_spread_over_stream_shards_is_judged_as_a_whole_and_once as split_across_containers,
)
from tests.integration.iam_conformance import FAILURE_DESTINATION, assert_conforms, recording

pytestmark = pytest.mark.integration
__all__ = ["fast"]  # fixture

#: The Lambda service's own use of the role: the stream mapping, its failure destination, X-Ray, logs.
SERVICE_ONLY = {
    **{
        f"dynamodb:{action}": "the DynamoDB stream event source mapping reads the stream with the function's role"
        for action in ("DescribeStream", "GetRecords", "GetShardIterator", "ListStreams")
    },
    "sqs:SendMessage": "the event source mapping sends failed batches to the on-failure destination",
    **FAILURE_DESTINATION,
    "kms:GenerateDataKey": "SNS encrypts a published message with the topic's key on the publisher's behalf",
    "kms:Decrypt": "SNS encrypts a published message with the topic's key on the publisher's behalf",
}


def test_every_call_the_hot_key_function_makes_is_granted_to_its_role(aws: Aws, fast: Aws) -> None:
    # When several containers count a hot entity's load, one judges the window, splits it and announces it;
    # and an announcement that fails once releases its claim and goes out later (two of its own scenarios,
    # run again while recording)
    with recording("hotkeys") as called:
        split_across_containers(fast)
        alert_retried(fast)
    # Then every action it called is granted, and everything granted is called or is the service's own
    assert_conforms("hotkeys", called, not_called=SERVICE_ONLY)
