"""Secrets Manager's four rotation steps for the cursor-signing key.

Secrets Manager invokes the function once per step, with the secret, a token
naming the new version, and the step; any step may be retried, so each one
first looks at what is already there. The key is an HMAC key that only the
query function uses, and that function reads it from the secret itself
(``query.cursor.CursorKeys``), so there is no downstream system to update:

* ``createSecret``: a new random key, staged ``AWSPENDING`` under the token
  (left as it is if a retried step already made it);
* ``setSecret``: nothing to set anywhere;
* ``testSecret``: the pending key is long enough to sign cursors;
* ``finishSecret``: ``AWSCURRENT`` moves to the token's version (and
  ``AWSPENDING`` comes off it), and Secrets Manager labels the version it
  leaves ``AWSPREVIOUS``, under which cursors are still accepted until the
  next rotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from adapters.observability import logger
from adapters.secret_versions import MIN_SECRET_CHARS, SecretDescription

#: Letters and digits in a new key (the stack's first key has as many).
KEY_LENGTH = 64
STEPS = ("createSecret", "setSecret", "testSecret", "finishSecret")
CURRENT, PENDING = "AWSCURRENT", "AWSPENDING"


class RotationError(Exception):
    """A step that must not go ahead: Secrets Manager marks the rotation failed and keeps AWSCURRENT as it is."""


@dataclass(frozen=True, slots=True)
class RotationStep:
    secret_id: str
    token: str
    step: str

    @classmethod
    def from_event(cls, event: object) -> RotationStep:
        if not isinstance(event, Mapping):
            raise RotationError(f"the event must be a JSON object, got {type(event).__name__}")
        values = [event.get(name) for name in ("SecretId", "ClientRequestToken", "Step")]
        if not all(isinstance(value, str) and value for value in values):
            raise RotationError("the event needs SecretId, ClientRequestToken and Step, each a non-empty string")
        secret_id, token, step = (str(value) for value in values)
        if step not in STEPS:
            raise RotationError(f"unknown step {step!r}; expected one of {', '.join(STEPS)}")
        return cls(secret_id, token, step)


class Versions(Protocol):
    def describe(self, secret_id: str) -> SecretDescription: ...
    def random_key(self, length: int) -> str: ...
    def value(self, secret_id: str, version_id: str, stage: str) -> str | None: ...
    def put(self, secret_id: str, version_id: str, value: str, stage: str) -> None: ...
    def move(self, secret_id: str, stage: str, *, to_version: str | None, from_version: str | None) -> None: ...


class KeyRotation:
    def __init__(self, versions: Versions) -> None:
        self._versions = versions

    def run(self, request: RotationStep) -> None:
        secret_id, token = request.secret_id, request.token
        described = self._versions.describe(secret_id)
        if not described.rotation_enabled:
            raise RotationError(f"rotation is not enabled on {secret_id}")
        stages = described.stages.get(token)
        if stages is None:
            raise RotationError(f"{secret_id} has no version {token} to rotate to")
        if CURRENT in stages:  # a finished rotation, invoked again
            logger.info("already AWSCURRENT", extra={"step": request.step, "version": token})
            return
        if PENDING not in stages:
            raise RotationError(f"version {token} of {secret_id} is not AWSPENDING")
        if request.step == "createSecret":  # a retried step finds its key already made
            if self._versions.value(secret_id, token, PENDING) is None:
                self._versions.put(secret_id, token, self._versions.random_key(KEY_LENGTH), PENDING)
        elif request.step == "testSecret":
            key = self._versions.value(secret_id, token, PENDING)
            if key is None or len(key.encode("utf-8")) < MIN_SECRET_CHARS:
                raise RotationError(f"the pending key of {secret_id} is missing or under {MIN_SECRET_CHARS} bytes")
        elif request.step == "finishSecret":
            current = next((v for v, labels in described.stages.items() if CURRENT in labels), None)
            self._versions.move(secret_id, CURRENT, to_version=token, from_version=current)
            # Done: no version stays AWSPENDING, or the next rotation would take this one for one in progress.
            self._versions.move(secret_id, PENDING, to_version=None, from_version=token)
        logger.info("rotation step done", extra={"step": request.step, "version": token})
