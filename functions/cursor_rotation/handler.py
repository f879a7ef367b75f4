"""Lambda entry point of the cursor-key rotation (``cursor_rotation.handler.handler``), invoked by
Secrets Manager once per rotation step. Thin on purpose: Powertools decorators, the event parsed, one call."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import logger
from adapters.secret_versions import SecretVersions
from cursor_rotation.logic import KeyRotation, RotationStep

ROTATION = KeyRotation(SecretVersions())
tune_collector()  # last: everything above is init


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> None:
    ROTATION.run(RotationStep.from_event(event))
