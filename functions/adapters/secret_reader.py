"""Reading a secret from AWS Secrets Manager, through Powertools' parameters utility.

The client is the shared one (standard retries, region and endpoint from the
environment). Callers decide how long to keep the value; this module does not cache.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.parameters import SecretsProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
from botocore.exceptions import ClientError

from adapters.clients import client

#: Secrets Manager's staging labels: the version in use, and the one it replaced.
CURRENT = "AWSCURRENT"
PREVIOUS = "AWSPREVIOUS"


def read_secret(secret_id: str, stage: str = CURRENT) -> bytes | None:
    """The value of secret ``secret_id`` (a name or ARN) at staging label ``stage``, as bytes:
    the ``SecretString`` UTF-8 encoded, or the ``SecretBinary`` as stored. None when no version
    carries the label (a secret never rotated has no ``AWSPREVIOUS``)."""
    provider = SecretsProvider(boto3_client=client("secretsmanager"))
    try:
        # max_age=0: no Powertools cache; the caller decides how long to keep the value.
        value = provider.get(secret_id, max_age=0, VersionStage=stage)
    except GetParameterError as exc:
        # Powertools re-raises the client's error inside its handler: the ClientError is the context.
        cause = exc.__context__
        missing = isinstance(cause, ClientError) and cause.response["Error"]["Code"] == "ResourceNotFoundException"
        if missing and stage != CURRENT:
            return None
        raise
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"secret {secret_id} is neither a string nor binary")
