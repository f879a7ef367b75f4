"""Reading a secret from AWS Secrets Manager: one GetSecretValue on the shared client.

The client is the shared one (standard retries, region and endpoint from the
environment). Callers decide how long to keep the value; this module does not
cache, which is why Powertools' parameters utility is not used here: without its
cache it adds nothing to the call, and importing it (with boto3 and every other
provider) cost the query function's cold start 40-60 ms (docs/decisions.md).
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from adapters.clients import client

#: Secrets Manager's staging labels: the version in use, and the one it replaced.
CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"


def read_secret(secret_id: str, stage: str = CURRENT) -> bytes | None:
    """The value of secret ``secret_id`` (a name or ARN) at staging label ``stage``, as bytes:
    the ``SecretString`` UTF-8 encoded, or the ``SecretBinary`` as stored. None when no version
    carries the label (a secret never rotated has no ``AWSPREVIOUS``)."""
    try:
        found = client("secretsmanager").get_secret_value(SecretId=secret_id, VersionStage=stage)
    except ClientError as exc:
        if stage != CURRENT and exc.response["Error"]["Code"] == "ResourceNotFoundException":
            return None
        raise
    if "SecretString" in found:
        return str(found["SecretString"]).encode("utf-8")
    if "SecretBinary" in found:
        return bytes(found["SecretBinary"])
    raise TypeError(f"secret {secret_id} is neither a string nor binary")
