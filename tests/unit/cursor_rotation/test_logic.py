"""The rotation steps against a fake secret: each step is safe to retry, and a bad key never becomes current."""

from __future__ import annotations

import pytest

from adapters.secret_versions import SecretDescription
from cursor_rotation.logic import KEY_LENGTH, KeyRotation, RotationError, RotationStep

SECRET = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:cursor-AbCdEf"


class FakeVersions:
    def __init__(self, *, enabled: bool = True, new_key: str = "n" * KEY_LENGTH) -> None:
        self.enabled = enabled
        self.new_key = new_key
        self.stages = {"v1": ["AWSCURRENT"], "t": ["AWSPENDING"]}
        self.values = {"v1": "o" * KEY_LENGTH}
        self.generated = 0

    def describe(self, secret_id: str) -> SecretDescription:
        return SecretDescription(self.enabled, {v: list(s) for v, s in self.stages.items()})

    def random_key(self, length: int) -> str:
        self.generated += 1
        return self.new_key[:length]

    def value(self, secret_id: str, version_id: str, stage: str) -> str | None:
        return self.values.get(version_id) if stage in self.stages.get(version_id, []) else None

    def put(self, secret_id: str, version_id: str, value: str, stage: str) -> None:
        self.values[version_id] = value
        if stage not in self.stages.setdefault(version_id, []):
            self.stages[version_id].append(stage)

    def move(self, secret_id: str, stage: str, *, to_version: str | None, from_version: str | None) -> None:
        if from_version is not None:
            self.stages[from_version].remove(stage)
            if stage == "AWSCURRENT":
                self.stages[from_version].append("AWSPREVIOUS")
        if to_version is not None:
            self.stages[to_version].append(stage)


def run(versions: FakeVersions, *steps: str) -> None:
    rotation = KeyRotation(versions)
    for step in steps:
        rotation.run(RotationStep(SECRET, "t", step))


def test_the_four_steps_make_a_new_current_key_and_keep_the_old_one_as_previous() -> None:
    versions = FakeVersions()
    run(versions, "createSecret", "setSecret", "testSecret", "finishSecret")
    assert versions.stages == {"v1": ["AWSPREVIOUS"], "t": ["AWSCURRENT"]}
    assert versions.values["t"] == "n" * KEY_LENGTH


def test_every_step_may_be_retried() -> None:
    versions = FakeVersions()
    run(versions, "createSecret", "createSecret", "setSecret", "testSecret", "testSecret", "finishSecret")
    run(versions, "finishSecret")  # already current: nothing to do
    assert versions.generated == 1
    assert versions.stages == {"v1": ["AWSPREVIOUS"], "t": ["AWSCURRENT"]}


def test_a_key_too_short_to_sign_cursors_fails_the_test_step_and_never_becomes_current() -> None:
    versions = FakeVersions(new_key="short")
    with pytest.raises(RotationError, match="under 32 bytes"):
        run(versions, "createSecret", "setSecret", "testSecret")
    assert versions.stages["v1"] == ["AWSCURRENT"]


@pytest.mark.parametrize(
    ("versions", "token", "reason"),
    [
        (FakeVersions(enabled=False), "t", "not enabled"),
        (FakeVersions(), "unknown", "no version unknown"),
        (FakeVersions(), "v1-stale", "no version"),
    ],
)
def test_a_step_for_a_version_it_cannot_rotate_is_refused(versions: FakeVersions, token: str, reason: str) -> None:
    with pytest.raises(RotationError, match=reason):
        KeyRotation(versions).run(RotationStep(SECRET, token, "createSecret"))


def test_a_version_that_is_neither_pending_nor_current_is_refused() -> None:
    versions = FakeVersions()
    versions.stages["t"] = []
    with pytest.raises(RotationError, match="not AWSPENDING"):
        run(versions, "createSecret")


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ([], "JSON object"),
        ({"SecretId": SECRET, "Step": "createSecret"}, "ClientRequestToken"),
        ({"SecretId": SECRET, "ClientRequestToken": "t", "Step": "dropSecret"}, "unknown step 'dropSecret'"),
    ],
)
def test_an_event_secrets_manager_never_sends_is_refused(event: object, reason: str) -> None:
    with pytest.raises(RotationError, match=reason):
        RotationStep.from_event(event)
