"""A secret's versions and staging labels in AWS Secrets Manager: what the query function reads
(:func:`read_secret`), and what a rotation function reads and moves (:class:`SecretVersions`).

The client is the shared one (standard retries, region and endpoint from the environment).
Callers decide how long to keep a value; this module does not cache, which is why Powertools'
parameters utility is not used here: without its cache it adds nothing to the call, and
importing it (with boto3 and every other provider) cost the query function's cold start
40-60 ms (docs/decisions.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from adapters.clients import client, error_code

#: Secrets Manager's staging labels: the version in use, and the one it replaced.
CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"
#: The shortest cursor-signing key the query function accepts and a rotation may stage (characters, or bytes
#: once UTF-8 encoded).
MIN_SECRET_CHARS = 32


def read_secret(secret_id: str, stage: str = CURRENT) -> bytes | None:
    """The value of secret ``secret_id`` (a name or ARN) at staging label ``stage``, as bytes:
    the ``SecretString`` UTF-8 encoded, or the ``SecretBinary`` as stored. None when no version
    carries the label (a secret never rotated has no ``AWSPREVIOUS``)."""
    try:
        found = client("secretsmanager").get_secret_value(SecretId=secret_id, VersionStage=stage)
    except ClientError as exc:
        if stage != CURRENT and error_code(exc) == "ResourceNotFoundException":
            return None
        raise
    if "SecretString" in found:
        return str(found["SecretString"]).encode("utf-8")
    if "SecretBinary" in found:
        return bytes(found["SecretBinary"])
    raise TypeError(f"secret {secret_id} is neither a string nor binary")


@dataclass(frozen=True, slots=True)
class SecretDescription:
    rotation_enabled: bool
    #: Version id -> its staging labels.
    stages: dict[str, list[str]]


class SecretVersions:
    """DescribeSecret, GetRandomPassword, GetSecretValue, PutSecretValue and UpdateSecretVersionStage, typed."""

    def __init__(self, secrets_client: Any = None) -> None:
        self._client = secrets_client

    @property
    def _secrets(self) -> Any:
        return self._client or client("secretsmanager")

    def describe(self, secret_id: str) -> SecretDescription:
        found = self._secrets.describe_secret(SecretId=secret_id)
        return SecretDescription(
            rotation_enabled=bool(found.get("RotationEnabled")), stages=dict(found.get("VersionIdsToStages", {}))
        )

    def random_key(self, length: int) -> str:
        """Letters and digits from Secrets Manager's generator (the one that made the first key)."""
        return str(self._secrets.get_random_password(PasswordLength=length, ExcludePunctuation=True)["RandomPassword"])

    def value(self, secret_id: str, version_id: str, stage: str) -> str | None:
        """The text of version ``version_id`` if it carries ``stage``; None when it does not exist."""
        try:
            found = self._secrets.get_secret_value(SecretId=secret_id, VersionId=version_id, VersionStage=stage)
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return None
            raise
        return str(found["SecretString"])

    def put(self, secret_id: str, version_id: str, value: str, stage: str) -> None:
        self._secrets.put_secret_value(
            SecretId=secret_id, ClientRequestToken=version_id, SecretString=value, VersionStages=[stage]
        )

    def move(self, secret_id: str, stage: str, *, to_version: str | None, from_version: str | None) -> None:
        """Move ``stage`` from ``from_version`` to ``to_version`` (either may be None: only add, only remove).
        Moving AWSCURRENT makes Secrets Manager label the version it leaves AWSPREVIOUS."""
        request = {"SecretId": secret_id, "VersionStage": stage}
        if to_version is not None:
            request["MoveToVersionId"] = to_version
        if from_version is not None:
            request["RemoveFromVersionId"] = from_version
        self._secrets.update_secret_version_stage(**request)
