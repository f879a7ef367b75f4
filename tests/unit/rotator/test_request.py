"""The rotator's event: the schedule's empty payload, an operator's dry run, and what is refused."""

from __future__ import annotations

import re

import pytest

from adapters.table_builds import build_request
from keydesign import parse_timestamp
from rotator.request import MAX_BUILDS, InvalidRequest, RotationRequest


def parse(event: object, *, dry_run_default: bool = False, allow_now_override: bool = False) -> RotationRequest:
    return RotationRequest.from_event(event, dry_run_default=dry_run_default, allow_now_override=allow_now_override)


@pytest.mark.parametrize("event", [{}, None])
def test_the_schedule_payload_is_a_live_run_on_the_real_clock(event: object) -> None:
    assert parse(event) == RotationRequest(dry_run=False, now=None)


def test_an_operator_dry_run_at_another_time() -> None:
    request = parse({"dry_run": True, "now": "2026-11-22T23:59:59Z"})
    assert request == RotationRequest(dry_run=True, now=parse_timestamp("2026-11-22T23:59:59Z"))


def test_a_live_run_refuses_another_clock_unless_allowed() -> None:
    with pytest.raises(InvalidRequest, match="real clock") as caught:
        parse({"now": "2030-01-01T00:00:00Z"})
    assert caught.value.field == "now"
    allowed = parse({"now": "2030-01-01T00:00:00Z"}, allow_now_override=True)
    assert allowed.now == parse_timestamp("2030-01-01T00:00:00Z") and not allowed.dry_run


def test_dry_run_in_the_environment_cannot_be_turned_off_by_an_event() -> None:
    assert parse({"dry_run": False}, dry_run_default=True).dry_run
    assert parse({"now": "2030-01-01T00:00:00Z"}, dry_run_default=True).dry_run


@pytest.mark.parametrize(
    ("event", "field", "fragment"),
    [
        ({"dryrun": True}, "dryrun", "not a rotator option"),
        ({"dry_run": "true"}, "dry_run", "true or false"),
        ({"dry_run": 1}, "dry_run", "true or false"),
        ({"dry_run": True, "now": "tomorrow"}, "now", "RFC 3339"),
        ({"dry_run": True, "now": "2026-11-22T23:59:59"}, "now", "RFC 3339"),
        (["dry_run"], "event", "JSON object"),
    ],
)
def test_a_malformed_event_is_refused(event: object, field: str, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment) as caught:
        parse(event)
    assert caught.value.field == field


def _rule_event(detail: object) -> dict[str, object]:
    """What an EventBridge rule on a schedule delivers (the documented envelope)."""
    return {
        "version": "0",
        "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": "2030-01-01T00:00:00Z",
        "region": "eu-west-1",
        "resources": ["arn:aws:events:eu-west-1:123456789012:rule/rotate"],
        "detail": detail,
    }


def test_an_eventbridge_rule_envelope_is_a_plain_scheduled_run() -> None:
    # Given a rule's scheduled event, whose "time" would be 2030
    # When it is parsed
    request = parse(_rule_event({}))
    # Then it is a live run on the real clock, not a refusal naming "account"
    assert request == RotationRequest(dry_run=False, now=None)
    assert parse(_rule_event(None)) == RotationRequest(dry_run=False, now=None)


def test_a_rule_envelope_carries_its_options_in_detail_under_the_same_rules() -> None:
    assert parse(_rule_event({"dry_run": True})).dry_run
    with pytest.raises(InvalidRequest, match="real clock"):
        parse(_rule_event({"now": "2030-01-01T00:00:00Z"}))
    with pytest.raises(InvalidRequest, match=re.escape("send {} for a scheduled run")) as caught:
        parse(_rule_event({"dryrun": True}))
    assert caught.value.field == "dryrun"
    with pytest.raises(InvalidRequest, match="JSON object of rotator options") as wrong:
        parse(_rule_event(["dry_run"]))
    assert wrong.value.field == "detail"


def test_a_bad_option_name_is_shown_escaped() -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse({"dry\x00run\udc80": True})
    assert caught.value.field == "dry\\x00run\\udc80"


def test_ingests_build_request_is_read_as_the_tables_to_build() -> None:
    # Given the event ingest sends (adapters.table_builds), duplicates and all
    event = build_request(["readings-2026-11-20", "readings-2026-11-19", "readings-2026-11-20"])
    # Then it is a build of each table once, a live run on the real clock
    assert parse(event) == RotationRequest(
        dry_run=False, now=None, build=("readings-2026-11-19", "readings-2026-11-20")
    )
    assert parse({}).build == ()


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        ("readings-2026-11-20", "non-empty list of table names"),
        ([], "non-empty list of table names"),
        ([""], "non-empty list of table names"),
        ([3], "non-empty list of table names"),
        ([f"readings-2026-11-{d:02}" for d in range(1, MAX_BUILDS + 2)], f"at most {MAX_BUILDS}"),
    ],
)
def test_a_malformed_build_request_is_refused(build: object, fragment: str) -> None:
    with pytest.raises(InvalidRequest, match=fragment) as caught:
        parse({"build": build})
    assert caught.value.field == "build"
